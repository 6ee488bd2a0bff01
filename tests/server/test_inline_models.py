"""A sync model proven cheap runs on the event loop; one that waits or turns slow never does.

The calls go through ``do_event_async`` on an event loop, as the HTTP and gRPC faces make them.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import mlserve
from mlserve import V2ModelServer
from mlserve.core.events import Event
from mlserve.core.inline_rule import LEARN_CALLS, RELEARNS, STALL_FACTOR, WARM_CALLS
from mlserve.core.limits import ServerLimits

LEARNING = WARM_CALLS + LEARN_CALLS


class _Where(V2ModelServer):
    """Answers the name of the thread its predict ran on; sleeps ``inputs[0]`` seconds
    (computes, when negative)."""

    def load(self) -> None:
        pass

    def predict(self, request: dict[str, Any]) -> Any:
        seconds = request["inputs"][0]
        if isinstance(seconds, float) and seconds < 0:
            until = time.thread_time() - seconds
            while time.thread_time() < until:
                pass
        elif seconds:
            time.sleep(seconds)
        return [threading.current_thread().name]


def _server(**limits: Any) -> Any:
    fn = mlserve.new_function("inline")
    fn.add_model("where", class_name=_Where)
    server = fn.to_mock_server()
    server.limits = ServerLimits.from_env({}, **limits)
    return server


def _threads(server: Any, *sleeps: Any) -> list[str]:
    """The thread each call's predict ran on, calls made one after another on a loop."""
    model = next(server.iter_models())

    async def calls() -> list[str]:
        names = []
        for seconds in sleeps:
            event = Event(body={"inputs": [seconds]}, path="infer", trigger="http")
            names.append((await model.do_event_async(event)).body["outputs"][0])
        return names

    return asyncio.run(calls())


def _gate(server: Any) -> Any:
    return next(server.iter_models())._gate


def _on_workers(names: list[str]) -> bool:
    return all(name.startswith("mlserve-worker") for name in names)


def test_a_cheap_sync_model_moves_onto_the_loop_after_its_learning_calls() -> None:
    server = _server()
    names = _threads(server, *[0.0] * (LEARNING + 1))
    assert _on_workers(names[:LEARNING]), names
    assert _gate(server).inline
    assert names[-1] == threading.current_thread().name  # the loop's: asyncio.run's here


def test_a_model_that_waits_on_io_stays_on_its_threads() -> None:
    server = _server()
    names = _threads(server, *[0.002] * (LEARNING + 5))  # waits, almost no CPU
    assert not _gate(server).inline
    assert _on_workers(names)


def test_an_inline_model_that_turns_slow_goes_back_to_its_threads_to_be_measured_again() -> None:
    loop = threading.current_thread().name  # asyncio.run's, here
    for slow in (0.02, -0.02):  # 20 ms asleep, then computing: over 50 times the 0.2 ms bound
        server = _server(inline_predict_us=200)
        _threads(server, *[0.0] * LEARNING)
        for _ in range(RELEARNS):  # a stall may be the machine's: the model is timed again
            assert _threads(server, slow) == [loop]
            assert not _gate(server).inline
            names = _threads(server, *[0.0] * (LEARNING + 1))
            assert _on_workers(names[:LEARNING]) and names[-1] == loop, names
        assert _threads(server, slow) == [loop]  # one stall too many: threads for good
        assert not _gate(server).inline
        assert _on_workers(_threads(server, *[0.0] * (LEARNING + 5)))


def test_an_inline_model_that_stays_slow_is_not_moved_back_to_the_loop() -> None:
    server = _server(inline_predict_us=200)
    _threads(server, *[0.0] * LEARNING)
    assert _threads(server, -0.02) == [threading.current_thread().name]
    assert _on_workers(_threads(server, *[-0.02] * (LEARNING + 5)))  # timed again: too slow
    assert not _gate(server).inline


def test_inline_predict_us_0_keeps_every_call_on_threads() -> None:
    server = _server(inline_predict_us=0)
    assert _on_workers(_threads(server, *[0.0] * (LEARNING + 5)))
    assert not _gate(server).inline


def test_an_inline_model_answers_errors_as_on_its_threads() -> None:
    server = _server()
    _threads(server, *[0.0] * LEARNING)
    assert _gate(server).inline
    try:
        _threads(server, -1)  # time.sleep(-1): the model's own ValueError
    except ValueError as exc:
        assert "must be non-negative" in str(exc)
    else:
        raise AssertionError("the model's error was lost")
    assert _threads(server, 0.0) == [threading.current_thread().name]
    answer = server.test("/v2/models/where/infer", {"inputs": [-1]}, silent=True)
    assert answer.status_code == 500


class _Collects(V2ModelServer):
    """Collects garbage when asked, and answers how long that took (ms) and its thread."""

    def load(self) -> None:
        pass

    def predict(self, request: dict[str, Any]) -> Any:
        took = 0.0
        if request["inputs"][0]:
            started = time.perf_counter()
            gc.collect()
            took = (time.perf_counter() - started) * 1000
        return [took, threading.current_thread().name]


def test_a_garbage_collection_during_an_inline_predict_is_not_held_against_the_model() -> None:
    fn = mlserve.new_function("collects")
    fn.add_model("collects", class_name=_Collects)
    server = fn.to_mock_server()
    server.limits = ServerLimits.from_env({}, inline_predict_us=150)  # a stall is 7.5 ms
    model = next(server.iter_models())
    junk = [[] for _ in range(500_000)]  # a full collection walks them all: tens of ms

    async def call(collect: int) -> list[Any]:
        event = Event(body={"inputs": [collect]}, path="infer", trigger="http")
        return list((await model.do_event_async(event)).body["outputs"])

    async def calls() -> list[Any]:
        for _ in range(LEARNING):
            await call(0)
        return [await call(1), await call(0)]

    try:
        (took, collected_on), (_, then_on) = asyncio.run(calls())
    finally:
        del junk
    assert took > 150 * STALL_FACTOR / 1000  # past the stall bound
    assert collected_on == then_on == threading.current_thread().name
    assert _gate(server).inline
