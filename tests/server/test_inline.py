"""The in-process path: a sync graph answers in the caller's thread, with no event
loop; a graph with any async part keeps the loop, and both answer alike."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import mlserve
from mlserve import Event, GraphServer, V2ModelServer
from mlserve.core.events import Response
from mlserve.core.limits import ServerLimits
from tests.fixtures import AsyncMultiplier, Multiplier, Raising, serve


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class WhereAmI(V2ModelServer):
    """Answers with the thread its predict ran in and whether a loop ran there."""

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [threading.get_ident(), _running_loop() is not None]


class AsyncWhereAmI(V2ModelServer):
    async def predict(self, request: dict[str, Any]) -> list[Any]:
        await asyncio.sleep(0)
        return [threading.get_ident(), _running_loop() is not None]


class Sleeper(V2ModelServer):
    def predict(self, request: dict[str, Any]) -> list[Any]:
        time.sleep(float(request["inputs"][0]))
        return ["slept"]


STEP_THREADS: list[int] = []


def where(body: Any) -> Any:
    """A flow step that notes its thread (in the body, and in STEP_THREADS)."""
    STEP_THREADS.append(threading.get_ident())
    return {**body, "step_thread": threading.get_ident()}


def _where_flow(engine: str, after_responder: bool = False) -> GraphServer:
    """A flow: a step, then a router with the model that responds (and a step after it)."""
    fn = mlserve.new_function("inline-flow")
    graph = fn.set_topology("flow", engine=engine)
    router = graph.to(name="where", handler=where).to("*", name="router")
    router.add_route("m", class_name=WhereAmI)
    router.respond()
    if after_responder:
        router.to(name="after", handler=where)
    return fn.to_mock_server(namespace={"where": where})


def _on_the_loop(server: GraphServer) -> GraphServer:
    """The same server with a handler that may always suspend: every call takes the loop."""

    async def always_the_loop(server: GraphServer, event: Event) -> Response | None:
        return None

    server.add_handler(always_the_loop)
    return server


def test_a_sync_router_runs_in_the_callers_thread_with_no_loop() -> None:
    server = serve({"m": WhereAmI})
    answer = server.test("/v2/models/m/infer", {"inputs": [1]})
    assert answer["outputs"] == [threading.get_ident(), False]
    assert server.runs_inline(Event(path="/v2/models/m/infer", method="POST"))


def test_run_answers_inline_too() -> None:
    server = serve({"m": WhereAmI})
    body = server.run(Event(body={"inputs": [1]}, path="/v2/models/m/infer"), get_body=True)
    assert body["outputs"] == [threading.get_ident(), False]


def test_a_sync_flow_runs_inline_on_the_sync_engine() -> None:
    server = _where_flow("sync")
    answer = server.test("/v2/models/m/infer", {"inputs": [1]})
    assert answer["outputs"] == [threading.get_ident(), False]


def test_an_async_engine_path_of_sync_steps_ending_at_its_responder_runs_inline() -> None:
    server = _where_flow("async")
    try:
        STEP_THREADS.clear()
        answer = server.test("/v2/models/m/infer", {"inputs": [1]})
        assert answer["outputs"] == [threading.get_ident(), False]
        assert STEP_THREADS == [threading.get_ident()]
    finally:
        server.wait_for_completion()


def test_an_async_engine_flow_going_on_after_its_responder_keeps_its_loop() -> None:
    server = _where_flow("async", after_responder=True)
    try:
        assert not server.runs_inline(Event(path="/v2/models/m/infer", method="POST"))
        answer = server.test("/v2/models/m/infer", {"inputs": [1]})
        assert answer["outputs"][0] != threading.get_ident()
        assert answer["outputs"][1] is False  # the sync predict still runs off the loop
    finally:
        server.wait_for_completion()


def test_an_async_engine_flow_without_a_responder_keeps_its_loop() -> None:
    fn = mlserve.new_function("inline-flow")
    fn.set_topology("flow", engine="async").to(name="where", handler=where)
    server = fn.to_mock_server(namespace={"where": where})
    try:
        assert not server.runs_inline(Event(path="/", method="POST"))
        answer = server.test("/", {"inputs": [1]})
        assert list(answer) == ["id"]  # answered once accepted, as mlrun's
    finally:
        server.wait_for_completion()


async def async_step(body: Any) -> Any:
    await asyncio.sleep(0)
    return {**body, "async_thread": threading.get_ident()}


def test_an_async_step_keeps_the_loop_and_answers() -> None:
    fn = mlserve.new_function("inline-flow")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="step", handler=async_step).to(name="where", handler=where).respond()
    server = fn.to_mock_server(namespace={"async_step": async_step, "where": where})
    try:
        assert not server.runs_inline(Event(path="/", method="POST"))
        answer = server.test("/", {"inputs": [1]})
        assert answer["async_thread"] != threading.get_ident()
        assert answer["step_thread"] != threading.get_ident()
    finally:
        server.wait_for_completion()


def test_an_async_model_keeps_the_loop_and_answers() -> None:
    server = serve({"m": AsyncWhereAmI})
    answer = server.test("/v2/models/m/infer", {"inputs": [1]})
    assert answer["outputs"][0] != threading.get_ident()
    assert answer["outputs"][1] is True


def test_one_async_model_puts_the_whole_router_on_the_loop() -> None:
    server = serve({"sync": WhereAmI, "async": AsyncMultiplier})
    assert not server.runs_inline(Event(path="/v2/models/sync/infer", method="POST"))
    assert server.test("/v2/models/sync/infer", {"inputs": [1]})["outputs"][0] != (
        threading.get_ident()
    )
    assert server.test("/v2/models/async/infer", {"inputs": [2]})["outputs"] == [2]


def test_batching_keeps_the_loop() -> None:
    server = serve({"m": (WhereAmI, {"max_batch_size": 4, "max_batch_time": 0.001})})
    assert not server.runs_inline(Event(path="/v2/models/m/infer", method="POST"))
    assert server.test("/v2/models/m/infer", {"inputs": [1]})["outputs"]


def test_a_repository_request_takes_the_loop_and_the_graph_is_asked_again() -> None:
    server = serve({"m": WhereAmI})
    server.model_control = True  # --model-control-mode explicit: load/unload allowed
    assert not server.runs_inline(Event(path="/v2/repository/index", method="POST"))
    assert server.runs_inline(Event(path="/v2/models/m/infer", method="POST"))
    server.test("/v2/repository/models/m/unload", {}, method="POST")
    assert server._inline is None
    server.test("/v2/repository/models/m/load", {}, method="POST")
    answer = server.test("/v2/models/m/infer", {"inputs": [1]})
    assert answer["outputs"] == [threading.get_ident(), False]


def test_a_handler_that_may_suspend_sends_its_requests_to_the_loop() -> None:
    server = _on_the_loop(serve({"m": WhereAmI}))
    assert server.test("/v2/models/m/infer", {"inputs": [1]})["outputs"][0] != (
        threading.get_ident()
    )


REQUESTS = [
    ("/v2/models/m/infer", {"inputs": [1, 2]}, ""),
    ("/v2/models/m/explain", {"inputs": [1, 2]}, ""),
    ("/v2/models/m/double", {"inputs": [3]}, ""),
    ("/v2/models/m", None, ""),
    ("/v2/models/m/ready", None, ""),
    ("/v2/models", None, ""),
    ("/v2/health/ready", None, ""),
    ("/v2", None, ""),
    ("/v2/models/nope/infer", {"inputs": [1]}, ""),
    ("/v2/models/m/infer", {"nothing": 1}, ""),
    ("/v2/models/m/nope", {"inputs": [1]}, ""),
    ("/v2/models/bad/infer", {"inputs": [1]}, ""),
    ("/v2/models/m/infer", b"not json", ""),
    ("/v2/models/m/infer", b'{"inputs": [4]}', ""),
    ("/v2/models/m/stats", None, ""),
    ("/v1/models/m", None, ""),
    ("/elsewhere", {"inputs": [1]}, ""),
    ("/v2/models/m/infer", {"inputs": [1]}, "PUT"),
]


def _comparable(answer: Any) -> Any:
    """An answer without what differs between two calls (ids, times, counters)."""
    if isinstance(answer, Response):
        return ("response", answer.status_code, _comparable(answer.body), answer.headers)
    if isinstance(answer, dict):
        skip = {"id", "timestamp", "inference_stats", "execution_count", "inference_count"}
        return {key: _comparable(value) for key, value in answer.items() if key not in skip}
    if isinstance(answer, list):
        return [_comparable(item) for item in answer]
    return answer


@pytest.mark.parametrize(("path", "body", "method"), REQUESTS)
def test_inline_and_loop_answers_are_the_same(path: str, body: Any, method: str) -> None:
    models = {"m": (Multiplier, {"multiplier": 3}), "bad": Raising}
    inline, loop = serve(models), _on_the_loop(serve(models))
    assert inline.runs_inline(Event(body=body, path=path, method=method or None))
    answers = []
    for server in (inline, loop):
        answer = server.test(path, body, method=method, silent=True)
        encoded = server.test(path, body, method=method, silent=True, get_body=False)
        answers.append((_comparable(answer), encoded.status_code, encoded.content_type))
    assert answers[0] == answers[1]


def test_inline_calls_count_in_stats_and_model_logs() -> None:
    server = serve({"m": Multiplier})
    for _ in range(3):
        server.test("/v2/models/m/infer", {"inputs": [1]})
    with pytest.raises(RuntimeError):
        server.test("/v2/models/m/infer", {"nothing": 1})
    stats = server.test("/v2/models/m/stats")["model_stats"][0]["inference_stats"]
    assert stats["success"]["count"] == 3
    assert stats["fail"]["count"] == 1


def test_a_sync_call_past_the_request_timeout_answers_504_when_it_ends() -> None:
    server = serve({"m": Sleeper})
    server.limits = ServerLimits(request_timeout=0.1)
    late = server.test("/v2/models/m/infer", {"inputs": [0.3]}, silent=True)
    assert late.status_code == 504
    assert late.body["error"] == "RequestTimeout: the request took longer than 0.1 s"
    quick = server.test("/v2/models/m/infer", {"inputs": [0.0]})
    assert quick["outputs"] == ["slept"]
    streamed = server.test("/v2/models/m/infer", {"inputs": [0.3]}, trigger="kafka")
    assert streamed["outputs"] == ["slept"]


def test_inline_calls_from_many_threads_each_run_in_their_own() -> None:
    server = serve({"m": WhereAmI})
    seen: dict[int, list[Any]] = {}

    def call() -> None:
        seen[threading.get_ident()] = server.test("/v2/models/m/infer", {"inputs": [1]})["outputs"]

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {ident: outputs[0] for ident, outputs in seen.items()} == {i: i for i in seen}
