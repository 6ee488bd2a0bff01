"""Shadow routes in the mock server: copies after the answer, errors kept away from the
caller, agreement counted, a bounded queue, shadow records in the model-log stream."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import mlserve
from mlserve.graph.routers import ModelRouter
from mlserve.graph.shadow import ShadowRunner, outputs_agree
from tests.fixtures import Multiplier, Raising


class Gated(Multiplier):
    """Waits for ``Gated.gate`` in each call (a shadow that cannot keep up)."""

    gate = threading.Event()
    calls = 0

    def predict(self, request: dict[str, Any]) -> list[Any]:
        Gated.calls += 1
        if not Gated.gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        return super().predict(request)


class Seen(Multiplier):
    """Remembers the bodies its predict saw."""

    bodies: list[Any] = []

    def predict(self, request: dict[str, Any]) -> list[Any]:
        Seen.bodies.append(request["inputs"])
        return [x * self.model + 0.001 for x in request["inputs"]]


def wait_for(condition: Callable[[], Any], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def made() -> Iterator[list[mlserve.GraphServer]]:
    servers: list[mlserve.GraphServer] = []
    yield servers
    for server in servers:
        for runner in _router(server).shadow_runners().values():
            runner.close()
        server.wait_for_completion()


def _metric(server: mlserve.GraphServer, sample: str) -> float:
    """A sample's value in ``/metrics`` (every router of this process counts there)."""
    metrics = server.test("/metrics")
    text = metrics.decode() if isinstance(metrics, bytes) else str(metrics)
    line = next(line for line in text.splitlines() if line.startswith(sample + " "))
    return float(line.rpartition(" ")[2])


def _router(server: mlserve.GraphServer) -> ModelRouter:
    router: ModelRouter = server.graph.object  # type: ignore[union-attr]
    return router


def _server(made: list[mlserve.GraphServer], shadows: dict[str, Any], **router: Any) -> Any:
    fn = mlserve.new_function("shadowed")
    fn.set_topology("router", **router)
    fn.add_model("m:v1", class_name=Multiplier, multiplier=2)
    for key, (cls, shadow) in shadows.items():
        fn.add_model(key, class_name=cls, multiplier=2, shadow=shadow)
    server = fn.to_mock_server()
    made.append(server)
    return server


def test_a_shadow_gets_a_copy_and_its_answers_are_compared(
    made: list[mlserve.GraphServer],
) -> None:
    Seen.bodies = []
    server = _server(made, {"m:next": (Seen, True)}, shadow_tolerance=0.01)
    for i in range(10):
        answer = server.test("/v2/models/m/infer", {"inputs": [i]})
        assert answer["outputs"] == [2 * i] and answer["model_version"] == "v1"
    counts = _router(server).shadow_runners()["m:next"].counts
    wait_for(lambda: counts.agree == 10)
    assert Seen.bodies == [[i] for i in range(10)]
    assert counts.to_dict() == {"agree": 10, "disagree": 0, "error": 0, "dropped": 0}
    # the shadow is never the name's answer, but its own version reaches it
    assert server.test("/v2/models/m/versions/next/infer", {"inputs": [1]})["outputs"] == [2.001]


def test_answers_outside_the_tolerance_disagree(made: list[mlserve.GraphServer]) -> None:
    server = _server(made, {"m-next": (Seen, "m")})
    server.test("/v2/models/m/infer", {"inputs": [1.0]})
    counts = _router(server).shadow_runners()["m-next"].counts
    wait_for(lambda: counts.disagree == 1)
    assert counts.agree == 0


def test_a_failing_shadow_never_reaches_the_caller(made: list[mlserve.GraphServer]) -> None:
    server = _server(made, {"m-bad": (Raising, "m")})
    for i in range(5):
        assert server.test("/v2/models/m/infer", {"inputs": [i]})["outputs"] == [2 * i]
    counts = _router(server).shadow_runners()["m-bad"].counts
    wait_for(lambda: counts.error == 5)
    assert _metric(server, 'mlserve_shadow_agreement_total{result="error",shadow="m-bad"}') >= 5


def test_a_shadow_that_cannot_keep_up_drops_copies(made: list[mlserve.GraphServer]) -> None:
    Gated.gate.clear()
    Gated.calls = 0
    server = _server(made, {"m:slow": (Gated, True)}, shadow_queue=3)
    started = time.monotonic()
    for i in range(20):
        assert server.test("/v2/models/m/infer", {"inputs": [i]})["outputs"] == [2 * i]
    assert time.monotonic() - started < 20  # answered while the shadow waits
    runner = _router(server).shadow_runners()["m:slow"]
    wait_for(lambda: Gated.calls == 1)
    assert runner.pending() <= 3  # bounded: one running, three waiting, the rest dropped
    assert runner.counts.dropped == 20 - 1 - runner.pending()
    dropped = _metric(server, 'mlserve_shadow_dropped_total{shadow="m:slow"}')
    assert dropped >= runner.counts.dropped > 0
    Gated.gate.set()
    wait_for(lambda: runner.counts.agree == 4)


def test_shadow_records_in_the_model_log_carry_the_primary_answer(
    made: list[mlserve.GraphServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLSERVE_DATA_DIR", str(tmp_path / "data"))
    stream = tmp_path / "logs.jsonl"
    fn = mlserve.new_function("logged")
    fn.add_model("m:v1", class_name=Multiplier, multiplier=2)
    fn.add_model("m:next", class_name=Multiplier, multiplier=3, shadow=True)
    fn.set_tracking(str(stream))
    server = fn.to_mock_server()
    made.append(server)
    server.test("/v2/models/m/infer", {"inputs": [5]})
    counts = _router(server).shadow_runners()["m:next"].counts
    wait_for(lambda: counts.disagree == 1)
    server.wait_for_completion()
    wait_for(lambda: stream.exists() and len(stream.read_text().splitlines()) == 2)
    records = [json.loads(line) for line in stream.read_text().splitlines()]
    primary = next(r for r in records if r["version"] == "v1")
    shadow = next(r for r in records if r["version"] == "next")
    assert "shadow" not in primary and primary["resp"]["outputs"] == [10]
    assert shadow["shadow"] is True and shadow["shadow_of"] == "m"
    assert shadow["resp"]["outputs"] == [15] and shadow["resp"]["primary_outputs"] == [10]


def test_outputs_agree_compares_tensors_and_numbers() -> None:
    tensor = {"name": "y", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}
    near = {**tensor, "data": [1.0, 2.0004]}
    assert outputs_agree({"outputs": [tensor]}, {"outputs": [tensor]})
    assert not outputs_agree({"outputs": [tensor]}, {"outputs": [near]})
    assert outputs_agree({"outputs": [tensor]}, {"outputs": [near]}, tolerance=0.001)
    assert not outputs_agree({"outputs": [1, 2]}, {"outputs": [1]})
    assert not outputs_agree({"outputs": [True]}, {"outputs": [1]})
    assert outputs_agree({"outputs": ["a"]}, {"outputs": ["a"]})


def test_a_runner_without_its_route_counts_an_error() -> None:
    runner = ShadowRunner("gone", lambda key: None, max_queue=1)
    event = mlserve.core.events.Event({"inputs": [1]}, path="infer", method="POST")
    runner.submit(event, {"inputs": [1]}, {"outputs": [1]})
    wait_for(lambda: runner.counts.error == 1)
    runner.close()


def test_an_unloaded_shadow_gets_no_copies(made: list[mlserve.GraphServer]) -> None:
    fn = mlserve.new_function("unloaded-shadow")
    fn.add_model("m:v1", class_name=Multiplier, multiplier=2)
    fn.add_model("m-next", class_name=Multiplier, multiplier=2, shadow="m")
    server = fn.to_mock_server(model_control=True)
    made.append(server)
    server.test("/v2/models/m/infer", {"inputs": [1]})
    counts = _router(server).shadow_runners()["m-next"].counts
    wait_for(lambda: counts.agree == 1)
    server.test("/v2/repository/models/m-next/unload", {})
    for i in range(5):
        assert server.test("/v2/models/m/infer", {"inputs": [i]})["outputs"] == [2 * i]
    time.sleep(0.2)
    assert counts.to_dict() == {"agree": 1, "disagree": 0, "error": 0, "dropped": 0}
    server.test("/v2/repository/models/m-next/load", {})
    server.test("/v2/models/m/infer", {"inputs": [1]})
    wait_for(lambda: counts.agree == 2)
