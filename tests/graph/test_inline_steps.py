"""A sync flow step proven cheap runs on the event loop; one that waits or turns slow never does.

The flows run on the async engine with a coroutine first step, so every call takes
the mock server's background loop, as a request through the HTTP face does.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import pytest

import mlserve
from mlserve.core.inline_rule import LEARN_CALLS, RELEARNS, STALL_FACTOR, WARM_CALLS
from mlserve.core.limits import ServerLimits

LEARNING = WARM_CALLS + LEARN_CALLS
LOOP = "mlserve-loop"


async def first(body: dict[str, Any]) -> dict[str, Any]:
    """A coroutine step: the flow needs its event loop."""
    return body


def where(body: dict[str, Any]) -> dict[str, Any]:
    """Answers the thread it ran on, after doing what the body asks: sleep or
    compute ``seconds``, fail, run a coroutine with ``asyncio.run``, or collect
    garbage (then ``gc_ms`` says how long that took)."""
    seconds = body.get("seconds", 0.0)
    answer: dict[str, Any] = {}
    if body.get("compute"):
        until = time.thread_time() + seconds
        while time.thread_time() < until:
            pass
    elif seconds:
        time.sleep(seconds)
    if body.get("fail"):
        raise ValueError("the step failed on purpose")
    if body.get("asyncio_run"):
        answer["ran"] = asyncio.run(first({"ok": True}))
    if body.get("collect"):
        started = time.perf_counter()
        gc.collect()
        answer["gc_ms"] = (time.perf_counter() - started) * 1000
    answer["thread"] = threading.current_thread().name
    return answer


def _server(**limits: Any) -> Any:
    fn = mlserve.new_function("steps", kind="serving")
    flow = fn.set_topology("flow", engine="async")
    flow.to(name="first", handler=first).to(name="where", handler=where).respond()
    server = fn.to_mock_server()
    server.limits = ServerLimits.from_env({}, **limits)
    return server


def _threads(server: Any, count: int, **body: Any) -> list[str]:
    return [server.test("/", body)["thread"] for _ in range(count)]


def _on_workers(names: list[str]) -> bool:
    return all(name.startswith("mlserve-worker") for name in names)


def _step_rule(server: Any) -> Any:
    return server.graph["where"]._call.rule


@pytest.fixture
def server() -> Any:
    server = _server()
    yield server
    server.wait_for_completion()


def test_a_cheap_sync_step_moves_onto_the_loop_after_its_learning_calls(server: Any) -> None:
    names = _threads(server, LEARNING + 2)
    assert _on_workers(names[:LEARNING]), names
    assert names[LEARNING:] == [LOOP, LOOP]
    assert _step_rule(server).inline


def test_a_step_that_waits_stays_on_the_worker_threads(server: Any) -> None:
    names = _threads(server, LEARNING + 5, seconds=0.002)  # waits, almost no CPU
    assert _on_workers(names), names
    assert not _step_rule(server).inline


@pytest.mark.parametrize("compute", [False, True], ids=["sleeps", "computes"])
def test_an_inline_step_that_turns_slow_goes_back_to_the_threads_to_be_measured_again(
    server: Any, compute: bool
) -> None:
    _threads(server, LEARNING)
    slow = 0.2 * STALL_FACTOR / 1000 * 2  # twice the stall bound of the 200 us default
    for _ in range(RELEARNS):
        assert _threads(server, 1, seconds=slow, compute=compute) == [LOOP]
        assert not _step_rule(server).inline
        names = _threads(server, LEARNING + 1)
        assert _on_workers(names[:LEARNING]) and names[-1] == LOOP, names
    assert _threads(server, 1, seconds=slow, compute=compute) == [LOOP]
    assert not _step_rule(server).inline  # one stall too many: threads for good
    assert _on_workers(_threads(server, LEARNING + 5))


def test_inline_predict_us_0_keeps_every_step_call_on_threads() -> None:
    server = _server(inline_predict_us=0)
    try:
        assert _on_workers(_threads(server, LEARNING + 5))
    finally:
        server.wait_for_completion()


def test_an_inline_step_fails_as_on_a_thread(server: Any) -> None:
    failed_on_thread = server.test("/", {"fail": True}, silent=True)
    _threads(server, LEARNING)
    assert _step_rule(server).inline
    failed_inline = server.test("/", {"fail": True}, silent=True)
    assert failed_inline.status_code == failed_on_thread.status_code == 500
    assert failed_inline.body == failed_on_thread.body
    assert "the step failed on purpose" in str(failed_inline.body)
    assert _threads(server, 1) == [LOOP]  # a failure is not a stall


def test_an_inline_step_may_run_its_own_event_loop_as_on_a_thread(server: Any) -> None:
    _threads(server, LEARNING)
    answer = server.test("/", {"asyncio_run": True})
    assert answer == {"ran": {"ok": True}, "thread": LOOP}
    assert _threads(server, 1) == [LOOP]


def test_a_garbage_collection_during_an_inline_call_is_not_held_against_the_step() -> None:
    server = _server(inline_predict_us=50)  # a stall is 2.5 ms
    junk = [[] for _ in range(300_000)]  # a full collection walks them all: tens of ms
    try:
        _threads(server, LEARNING)
        assert _step_rule(server).inline
        answer = server.test("/", {"collect": True})
        assert answer["gc_ms"] > 50 * STALL_FACTOR / 1000, answer  # past the stall bound
        assert answer["thread"] == LOOP
        assert _step_rule(server).inline
        assert _threads(server, 1) == [LOOP]
    finally:
        del junk
        server.wait_for_completion()
