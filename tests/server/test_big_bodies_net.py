"""A big JSON tensor request on a real server (docs/security.md#limits): health checks do not wait
behind it, and its peak memory stays within 4x the body."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.netserver import ServerProcess, start_server

HEADERS = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    served = start_server()
    yield served
    served.stop()


def _body(megabytes: int) -> tuple[bytes, np.ndarray]:
    count = megabytes * 1_000_000 // 20  # json.dumps writes ~20 bytes per float64
    data = np.random.default_rng(1).random(count)
    tensor = {"name": "x", "datatype": "FP64", "shape": [count], "data": data.tolist()}
    return json.dumps({"inputs": [tensor]}).encode(), data


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_20_mb_request_never_delays_a_health_check_by_over_0_3_s(server: ServerProcess) -> None:
    body, _ = _body(20)
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            while not done.is_set():
                started = time.monotonic()
                assert http.get("/v2/health/live").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.005)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            for _ in range(2):
                answer = http.post("/v2/models/echo/infer", content=body, headers=HEADERS)
                assert answer.status_code == 200
    finally:
        done.set()
        prober.join()
    assert len(latencies) > 10
    assert max(latencies) < 0.3, f"a health check waited {max(latencies):.3f} s"


def test_peak_memory_of_a_json_tensor_request_stays_within_4x_the_body() -> None:
    body, data = _body(40)
    fresh = start_server()  # its peak so far is its start-up's, no earlier big request's
    try:
        with httpx.Client(base_url=fresh.url, timeout=60) as http:
            http.post("/v2/models/echo/infer", json={"inputs": [1.0]}).raise_for_status()
            before = _peak_rss(fresh.proc.pid)
            answer = http.post("/v2/models/echo/infer", content=body, headers=HEADERS)
        grown = _peak_rss(fresh.proc.pid) - before
    finally:
        fresh.stop()
    assert answer.status_code == 200
    np.testing.assert_array_equal(answer.json()["outputs"][0]["data"], data)
    assert grown < 4 * len(body), (
        f"peak grew {grown / 1e6:.0f} MB for a {len(body) / 1e6:.0f} MB body"
    )
