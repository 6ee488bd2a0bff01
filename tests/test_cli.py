"""``mlserve serve``: SIGTERM drains requests in flight; ``--workers`` share the port."""

from __future__ import annotations

import signal
import threading
import time

import httpx

from tests.netserver import start_server


def test_sigterm_drains_in_flight_requests_then_exits_0() -> None:
    server = start_server()
    answers: list[httpx.Response] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            slow = threading.Thread(
                target=lambda: answers.append(
                    http.post("/v2/models/sleepy/infer", json={"inputs": [1.0]})
                )
            )
            slow.start()
            with httpx.Client(base_url=server.url, timeout=60) as probe:
                while not probe.get("/v2/models/sleepy/busy").json()["busy"]:
                    assert slow.is_alive()
                    time.sleep(0.01)
            server.proc.send_signal(signal.SIGTERM)
            slow.join(60)
        assert server.proc.wait(60) == 0
    finally:
        server.stop()
    assert [a.status_code for a in answers] == [200]
    assert answers[0].json()["outputs"] == ["slept"]


def test_workers_share_the_port() -> None:
    server = start_server("--workers", "2")
    pids: set[int] = set()
    try:
        deadline = time.monotonic() + 60  # the second worker may still be starting
        while time.monotonic() < deadline:  # a new connection each time: the kernel spreads them
            with httpx.Client(base_url=server.url, timeout=60) as http:
                answer = http.post("/v2/models/where/pid", json={})
                if answer.status_code == 200:
                    pids.add(answer.json()["pid"])
            if len(pids) == 2:
                break
        assert len(pids) == 2
        assert server.proc.pid not in pids  # the supervisor serves nothing itself
    finally:
        code = server.stop()
    assert code == 0
