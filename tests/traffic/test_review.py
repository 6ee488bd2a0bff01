"""A reviewer's checks of the rollout capability on real servers
(docs/graphs.md#rolling-out-a-new-model): the split over 20,000 HTTP calls,
stickiness under weight changes, a slow and a failing shadow under load, the same
keys through every face, and a canary pulled back under ``--workers 2`` whose
decision a restarted worker replays."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from scipy.stats import chisquare

from tests.kafka import topics
from tests.netserver import ServerProcess, start_server
from tests.traffic.rollout_fn import serving_function

FN = "tests/traffic/rollout_fn.py"
ADMIN = "adm-91ab"
AUTH = {"Authorization": f"Bearer {ADMIN}"}  # an admin token turns authentication on
KEYS = [f"customer-{i}" for i in range(2_000)]


@pytest.fixture(scope="module")
def lean() -> Iterator[ServerProcess]:
    """The rollout function on mlserve's own HTTP server, weights changed by an admin."""
    server = start_server(
        "--model-control-mode",
        "explicit",
        "--http",
        "mlserve",
        target=FN,
        env={"MLSERVE_ADMIN_TOKEN": ADMIN, "ROLLOUT_SHADOW_SLEEP": "5"},
    )
    yield server
    assert server.stop() == 0  # copies of the 5-second shadow under way never block a stop


def _routes(url: str, keys: list[str | None], connections: int = 8) -> list[str]:
    """The variant that served each call (``None``: a call without a routing key), over
    ``connections`` kept-alive connections: a few lines of HTTP/1.1 on a socket, so that
    tens of thousands of calls take seconds, not minutes, of this machine's two cores."""
    host, _, port = url.removeprefix("http://").partition(":")
    body = b'{"inputs": [1]}'
    head = (
        f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: {AUTH['Authorization']}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    ).encode()

    async def one_connection(indexes: range) -> list[tuple[int, str]]:
        reader, writer = await asyncio.open_connection(host, int(port))
        found = []
        try:
            for index in indexes:
                key = keys[index]
                extra = b"" if key is None else f"x-mlserve-route-key: {key}\r\n".encode()
                writer.write(head + extra + b"\r\n" + body)
                lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                assert lines[0].split()[1] == "200", lines
                fields = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
                answer = json.loads(await reader.readexactly(int(fields["content-length"])))
                route = answer["parameters"]["route"]
                assert fields["x-mlserve-route"] == route
                found.append((index, route))
        finally:
            writer.close()
        return found

    async def run() -> list[str]:
        shares = [range(i, len(keys), connections) for i in range(connections)]
        done = await asyncio.gather(*(one_connection(share) for share in shares))
        routes = [""] * len(keys)
        for index, route in (pair for pairs in done for pair in pairs):
            routes[index] = route
        return routes

    return asyncio.run(run())


def _set_weights(server: ServerProcess, weights: dict[str, float]) -> dict[str, float]:
    answer = httpx.post(
        f"{server.url}/v2/repository/models/m/weights",
        json={"weights": weights},
        headers=AUTH,
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    in_force: dict[str, float] = answer.json()["weights"]
    return in_force


def _fits(counts: Counter[str], weights: dict[str, float]) -> float:
    """The chi-square test's p-value of ``counts`` against ``weights``."""
    total, share = sum(counts.values()), sum(weights.values())
    observed = [counts[key] for key in weights]
    expected = [total * weight / share for weight in weights.values()]
    return float(chisquare(observed, expected).pvalue)


def test_20000_http_calls_split_by_weight_with_keys_and_without(lean: ServerProcess) -> None:
    weights = {"m:v1": 90.0, "m:v2": 10.0}
    random = Counter(_routes(lean.url, [None] * 20_000))
    assert set(random) == set(weights) and _fits(random, weights) > 0.01, random
    keys: list[str | None] = [f"k-{uuid.uuid4().hex}" for _ in range(20_000)]
    sticky = _routes(lean.url, keys)
    assert _fits(Counter(sticky), weights) > 0.01, Counter(sticky)
    again = _routes(lean.url, keys[:2_000])
    assert again == sticky[:2_000]  # each key where it was


def test_keys_stay_put_under_weight_changes_and_come_back(lean: ServerProcess) -> None:
    keys: list[str | None] = list(KEYS)
    try:
        base = _routes(lean.url, keys)
        assert _set_weights(lean, {"v2": 20}) == {"m:v1": 90.0, "m:v2": 20.0}
        raised = _routes(lean.url, keys)
        moved = [i for i, (a, b) in enumerate(zip(base, raised, strict=True)) if a != b]
        assert {raised[i] for i in moved} == {"m:v2"}  # only toward the canary
        assert abs(len(moved) / len(keys) - (20 / 110 - 10 / 100)) < 0.025, len(moved)
        assert _set_weights(lean, {"m:v2": 0}) == {"m:v1": 90.0, "m:v2": 0.0}
        assert set(_routes(lean.url, keys)) == {"m:v1"}
        _set_weights(lean, {"v2": 10})
        assert _routes(lean.url, keys) == base  # the same weights, the same variants
    finally:
        _set_weights(lean, {"m:v1": 90, "m:v2": 10})


def _traffic(server: ServerProcess) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v2/models/m/traffic", headers=AUTH, timeout=30)
    assert answer.status_code == 200, answer.text
    traffic: dict[str, Any] = answer.json()
    return traffic


def test_a_slow_and_a_failing_shadow_never_reach_the_callers(lean: ServerProcess) -> None:
    """300 calls, 8 at a time, while a 5-second shadow and a failing one get copies:
    every caller has its answer long before one copy ends, the copies past the bound
    are dropped and counted, the failures stay in the counts."""
    before = _traffic(lean)["shadows"]
    started = time.monotonic()
    routes = _routes(lean.url, [None] * 300)
    assert len(routes) == 300 and set(routes) <= {"m:v1", "m:v2"}
    took = time.monotonic() - started
    shadows = _traffic(lean)["shadows"]
    slow, bad = shadows["m:slow"], shadows["m-bad"]
    done = lambda counts: sum(counts.values())  # noqa: E731
    assert took < 5 or done(slow) - done(before["m:slow"]) < 300  # never waited for it
    assert slow["dropped"] > before["m:slow"]["dropped"]  # 300 copies, at most 100 under way
    deadline = time.monotonic() + 30
    while done(_traffic(lean)["shadows"]["m-bad"]) - done(before["m-bad"]) < 300:
        assert time.monotonic() < deadline, _traffic(lean)["shadows"]
        time.sleep(0.2)
    bad = _traffic(lean)["shadows"]["m-bad"]
    assert bad["agree"] == bad["disagree"] == 0 and bad["error"] > before["m-bad"]["error"]


def _grpc_route(client: grpcclient.InferenceServerClient, key: str) -> str:
    tensor = grpcclient.InferInput("x", [1], "FP64")
    tensor.set_data_from_numpy(np.array([1.0]))
    result = client.infer("m", [tensor], headers={"x-mlserve-route-key": key})
    route: str = result.get_response(as_json=True)["parameters"]["route"]["string_param"]
    return route


def test_the_same_keys_reach_the_same_variants_through_every_face(
    lean: ServerProcess, kafka: Any
) -> None:
    keys = KEYS[:100]
    mock = serving_function().to_mock_server()
    expected = [
        mock.test("/v2/models/m/infer", {"inputs": [1]}, headers={"x-mlserve-route-key": k})[
            "parameters"
        ]["route"]
        for k in keys
    ]
    mock.wait_for_completion()
    assert set(expected) == {"m:v1", "m:v2"}
    assert _routes(lean.url, list(keys)) == expected  # HTTP, mlserve's own server
    tag = uuid.uuid4().hex[:8]
    source, output = f"ab-in-{tag}", f"ab-out-{tag}"
    asgi = start_server(
        "--http", "asgi", "--kafka", f"{source}@{kafka.url}", "--group", f"ab-{tag}",
        "--output-topic", output, target=FN, env={"ROLLOUT_SHADOW_SLEEP": "0"},
    )  # fmt: skip
    try:
        assert _routes(asgi.url, list(keys)) == expected  # HTTP, the ASGI app under uvicorn
        client = grpcclient.InferenceServerClient(asgi.grpc_address)
        assert [_grpc_route(client, k) for k in keys] == expected
        body = json.dumps({"model": "m", "inputs": [1]}).encode()
        topics.produce(kafka.url, source, [(k.encode(), body, []) for k in keys])
        answers = topics.read(kafka.url, output, len(keys), 90, distinct=lambda m: m.key())
    finally:
        assert asgi.stop() == 0
    by_key = {m.key().decode(): json.loads(m.value())["parameters"]["route"] for m in answers}
    assert [by_key.get(k) for k in keys] == expected  # Kafka: the message's key


def _worker_weights(server: ServerProcess) -> dict[int, dict[str, float]]:
    """Each worker's weights of ``m``, asked on new connections until both answered."""
    seen: dict[int, dict[str, float]] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"two workers did not both answer: {seen}"
        with httpx.Client(base_url=server.url, timeout=30) as http:
            pid = http.post("/v2/models/pid/pid", json={}).json()["pid"]
            seen[pid] = http.get("/v2/models/m/traffic").json()["weights"]
    return seen


def _restart_one(server: ServerProcess, weights: dict[int, dict[str, float]]) -> dict[int, Any]:
    """Kill one worker; the weights of both once the supervisor started another."""
    before = set(weights)
    os.kill(min(before), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while set(weights) == before:
        assert time.monotonic() < deadline, "no worker was started again"
        weights = _worker_weights(server)
    return weights


def _new_connection_routes(server: ServerProcess, keys: list[str]) -> list[str]:
    """Each call on a new connection: the kernel spreads them over the workers."""
    found = []
    for key in keys:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            answer = http.post(
                "/v2/models/m/infer", json={"inputs": [1]}, headers={"x-mlserve-route-key": key}
            )
            found.append(answer.json()["parameters"]["route"])
    return found


def test_two_workers_split_alike_replay_weights_in_order_and_pull_a_canary_back(
    tmp_path: Path,
) -> None:
    """``tests/traffic/canary_fn.py`` (``m`` 50/50, ``m:v2`` under a rollback policy) on
    two workers: the keys reach the variants the mock picks; weights set in short and
    long form reach a restarted worker as the last one set; a canary that starts failing
    goes to 0 in both workers, and a worker started after that serves it at 0."""
    from tests.traffic.canary_fn import serving_function as canary_function

    switch = tmp_path / "fail"
    keys = KEYS[:60]
    mock = canary_function().to_mock_server()
    headers = [{"x-mlserve-route-key": k} for k in keys]
    expected = [
        mock.test("/v2/models/m/infer", {"inputs": [1]}, headers=h)["parameters"]["route"]
        for h in headers
    ]
    server = start_server(
        "--workers", "2", target="tests/traffic/canary_fn.py",
        env={"CANARY_FAIL_FILE": str(switch), "MLSERVE_MODEL_CONTROL_MODE": "explicit"},
    )  # fmt: skip
    try:
        assert _new_connection_routes(server, keys) == expected
        for change in ({"v2": 30}, {"m:v2": 40}, {"v2": 20}):  # the last one set wins
            with httpx.Client(base_url=server.url, timeout=30) as http:
                answer = http.post("/v2/repository/models/m/weights", json={"weights": change})
                assert answer.status_code == 200, answer.text
        want = {"m:v1": 50.0, "m:v2": 20.0}
        assert list(_restart_one(server, _worker_weights(server)).values()) == [want] * 2
        switch.touch()
        with httpx.Client(base_url=server.url, timeout=30) as http:  # one worker judges
            for _ in range(400):
                http.post("/v2/models/m/infer", json={"inputs": [1]})
                if http.get("/v2/models/m/traffic").json()["weights"]["m:v2"] == 0:
                    break
        rolled = {"m:v1": 50.0, "m:v2": 0.0}
        weights = _worker_weights(server)
        assert list(weights.values()) == [rolled] * 2
        assert list(_restart_one(server, weights).values()) == [rolled] * 2
        assert set(_new_connection_routes(server, keys)) == {"m:v1"}
    finally:
        code = server.stop()
    assert code == 0
