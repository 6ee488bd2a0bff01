"""Adaptive batching: merged predict calls, answers split back, failures kept to their batch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve import V2ModelServer
from mlserve.frameworks.tensorflow import TFModelServer
from tests.tf_models import tf_models


class Gated:
    """The first predict call waits at a gate, so a test can queue requests behind it."""

    def load(self) -> None:
        super().load()  # type: ignore[misc]
        self.gate = threading.Event()
        self.calls: list[int] = []

    def predict(self, request: dict[str, Any]) -> Any:
        inputs = request["inputs"]
        self.calls.append(
            len(inputs if not isinstance(inputs, dict) else next(iter(inputs.values())))
        )
        if len(self.calls) == 1:
            self.gate.wait(30)
        return super().predict(request)  # type: ignore[misc]


class Doubler(V2ModelServer):
    max_batch_size = 16

    def predict(self, request: dict[str, Any]) -> Any:
        x = np.asarray(request["inputs"])
        if x.ndim == 2 and x.shape[1] == 3 and len(x) > 2:
            return {"y": x[:-1] * 2}  # a broken model: one row short for big batches
        return {"y": x * 2, "s": x.sum(axis=-1)}


class GatedDoubler(Gated, Doubler):
    pass


class GatedTF(Gated, TFModelServer):
    pass


def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def tensor(x: np.ndarray, name: str = "x") -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}


def run_gated(server: mlserve.GraphServer, model: Any, path: str, bodies: list[dict]) -> list[Any]:
    """Sends bodies[0], then the rest while it runs; opens the gate once they all wait."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        first = pool.submit(server.test, path, bodies[0], silent=True)
        wait_until(lambda: len(model.calls) == 1)
        rest = [pool.submit(server.test, path, body, silent=True) for body in bodies[1:]]
        wait_until(lambda: model.batcher.queued == len(rest) or any(f.done() for f in rest))
        model.gate.set()
        return [f.result() for f in [first, *rest]]


def serve(cls: type, **params: Any) -> tuple[mlserve.GraphServer, Any]:
    fn = mlserve.new_function("batching")
    fn.add_model("m", class_name=cls, **params)
    server = fn.to_mock_server()
    return server, next(server.iter_models())


def outputs_of(answer: dict) -> dict[str, np.ndarray]:
    return {o["name"]: np.reshape(o["data"], o["shape"]) for o in answer["outputs"]}


def test_concurrent_requests_merge_and_split(rng=np.random.default_rng(0)) -> None:
    server, model = serve(GatedDoubler, max_batch_time=0.001, max_batch_size=32)
    xs = [rng.random((1 + i % 3, 2), dtype=np.float32) for i in range(10)]
    answers = run_gated(server, model, "/v2/models/m/infer", [{"inputs": [tensor(x)]} for x in xs])
    assert model.calls == [1, sum(len(x) for x in xs[1:])]
    for x, answer in zip(xs, answers, strict=True):
        got = outputs_of(answer)
        np.testing.assert_allclose(got["y"], x * 2)
        np.testing.assert_allclose(got["s"], x.sum(axis=1), rtol=1e-6)
    assert model.stats.execution_count == 2
    assert sum(size * d.count for size, d in model.stats.batches.items()) == sum(len(x) for x in xs)


def test_requested_outputs_respected_per_request() -> None:
    server, model = serve(GatedDoubler)
    x = np.ones((2, 2), np.float32)
    bodies = [
        {"inputs": [tensor(x * i)], **({"outputs": [{"name": "s"}]} if i % 2 else {})}
        for i in range(6)
    ]
    answers = run_gated(server, model, "/v2/models/m/infer", bodies)
    for i, answer in enumerate(answers):
        got = outputs_of(answer)
        assert sorted(got) == (["s"] if i % 2 else ["s", "y"])
        np.testing.assert_allclose(got["s"], (x * i).sum(axis=1))
    assert len(model.calls) == 3  # the gated one, then one batch per requested-output set


def test_wrong_row_count_fails_only_that_batch() -> None:
    server, model = serve(GatedDoubler)
    good = [{"inputs": [tensor(np.ones((1, 2), np.float32))]} for _ in range(3)]
    bad = [{"inputs": [tensor(np.ones((1, 3), np.float32))]} for _ in range(3)]
    answers = run_gated(
        server, model, "/v2/models/m/infer", [good[0], bad[0], good[1], bad[1], good[2], bad[2]]
    )
    for answer in answers[0::2]:
        np.testing.assert_allclose(outputs_of(answer)["y"], [[2, 2]])
    for response in answers[1::2]:
        assert response.status_code == 500
        assert "returned 2 rows for output 'y', expected 3" in response.body["error"]


def test_queue_bound_refuses_with_429() -> None:
    server, model = serve(GatedDoubler, max_queue_size=3)
    body = {"inputs": [tensor(np.ones((1, 2), np.float32))]}
    with ThreadPoolExecutor(5) as pool:
        first = pool.submit(server.test, "/v2/models/m/infer", body)
        wait_until(lambda: len(model.calls) == 1)
        queued: list[Future] = [
            pool.submit(server.test, "/v2/models/m/infer", body) for _ in range(3)
        ]
        wait_until(lambda: model.batcher.queued == 3)
        refused = server.test("/v2/models/m/infer", body, silent=True)
        model.gate.set()
        assert refused.status_code == 429 and "queue is full" in refused.body["error"]
        assert all(f.result()["outputs"] for f in [first, *queued])


def test_rows_form_and_oversized_requests_run_alone() -> None:
    server, model = serve(GatedDoubler, max_batch_size=2)
    model.gate.set()
    assert server.test("/v2/models/m/infer", {"inputs": [[1, 2]]})["outputs"]["y"] == [[2, 4]]
    big = server.test("/v2/models/m/infer", {"inputs": [tensor(np.ones((2, 2), np.float32) * 3)]})
    np.testing.assert_allclose(outputs_of(big)["y"], np.full((2, 2), 6.0))
    assert model.calls == [1, 2]


def test_off_without_max_batch_size() -> None:
    class Plain(V2ModelServer):
        def predict(self, request: dict[str, Any]) -> Any:
            return request["inputs"]

    server, model = serve(Plain)
    server.test("/v2/models/m/infer", {"inputs": [tensor(np.ones((1, 2), np.float32))]})
    assert getattr(model, "batcher", None) is None


def test_tensorflow_model_batches(tmp_path_factory: pytest.TempPathFactory) -> None:
    models = tf_models(tmp_path_factory)
    server, model = serve(GatedTF, model_path=str(models.mlp), max_batch_size=32)
    rng = np.random.default_rng(1)
    xs = [rng.random((1 + i % 2, 4), dtype=np.float32) for i in range(8)]
    answers = run_gated(
        server, model, "/v2/models/m/infer", [{"inputs": [tensor(x, "inputs")]} for x in xs]
    )
    assert len(model.calls) == 2
    for x, answer in zip(xs, answers, strict=True):
        np.testing.assert_allclose(
            outputs_of(answer)["output_0"], models.mlp_expected(x), rtol=1e-5, atol=1e-6
        )


def test_full_batches_split_at_max_batch_size() -> None:
    server, model = serve(GatedDoubler, max_batch_size=4)
    bodies = [{"inputs": [tensor(np.full((1, 2), i, np.float32))]} for i in range(10)]
    answers = run_gated(server, model, "/v2/models/m/infer", bodies)
    assert model.calls == [1, 4, 4, 1]
    for i, answer in enumerate(answers):
        np.testing.assert_allclose(outputs_of(answer)["y"], [[2 * i, 2 * i]])


def test_an_id_and_empty_extras_do_not_keep_requests_apart() -> None:
    server, model = serve(GatedDoubler)
    x = np.ones((1, 2), np.float32)
    extras: list[dict[str, Any]] = [
        {},
        {"id": "a"},
        {"parameters": {}},
        {"outputs": []},
        {"parameters": {"binary_data_output": False}, "id": "b"},
    ]
    bodies = [{"inputs": [tensor(x * i)], **extra} for i, extra in enumerate([{}, *extras])]
    answers = run_gated(server, model, "/v2/models/m/infer", bodies)
    assert model.calls == [1, len(extras)]  # the gated one, then one merged call
    for i, answer in enumerate(answers):
        np.testing.assert_allclose(outputs_of(answer)["y"], x * i * 2)


def test_requests_of_zero_rows_get_empty_answers() -> None:
    server, model = serve(GatedDoubler)
    sizes = [1, 0, 2, 1]  # 3 rows in 3 requests, not one each
    bodies = [{"inputs": [tensor(np.full((n, 2), i, np.float32))]} for i, n in enumerate(sizes)]
    answers = run_gated(server, model, "/v2/models/m/infer", bodies)
    assert model.calls == [1, 3]
    for i, (rows, answer) in enumerate(zip(sizes, answers, strict=True)):
        got = outputs_of(answer)
        assert got["y"].shape == (rows, 2) and got["s"].shape == (rows,)
        np.testing.assert_allclose(got["y"], np.full((rows, 2), 2 * i))


def test_a_lone_request_runs_when_its_window_ends_on_uvloop() -> None:
    """uvloop's timers fire to the millisecond, often before the loop's clock reaches a
    batch's deadline: a request with no company still runs when its window ends."""
    uvloop = pytest.importorskip("uvloop")
    import asyncio

    from mlserve.batching import Batcher
    from mlserve.protocol.forms import InferenceRequest, decode_request

    batcher = Batcher(lambda request: request.tensors["x"] * 2, max_batch_size=8)

    async def one_at_a_time() -> list[float]:
        results = []
        for value in range(50):  # a timer fires early about one time in five
            request = decode_request({"inputs": [tensor(np.array([[float(value)]]))]})
            assert isinstance(request, InferenceRequest)
            result = await asyncio.wait_for(batcher.submit(request), 5)
            results.append(float(result[0, 0]))
        return results

    assert uvloop.run(one_at_a_time()) == [2.0 * value for value in range(50)]
