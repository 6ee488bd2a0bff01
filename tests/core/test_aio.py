"""BackgroundLoop.run: a sync caller waits for a coroutine run on the loop's thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time

import pytest

from mlserve.core.aio import BackgroundLoop

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


@pytest.fixture
def background() -> BackgroundLoop:
    loop = BackgroundLoop()
    yield loop
    loop.close()


async def _where(value: int) -> tuple[int, str, str]:
    await asyncio.sleep(0)  # suspends: the task goes on in a later turn of the loop
    return value * 2, threading.current_thread().name, request_id.get()


def test_the_coroutine_runs_on_the_loop_thread_in_the_callers_context(
    background: BackgroundLoop,
) -> None:
    token = request_id.set("r-1")
    try:
        assert background.run(_where(21)) == (42, "mlserve-loop", "r-1")
    finally:
        request_id.reset(token)
    assert background.run(_where(1)) == (2, "mlserve-loop", "")


def test_an_error_reaches_the_caller_with_its_type(background: BackgroundLoop) -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        background.run(fail())
    assert background.run(_where(2))[0] == 4  # the loop goes on


def test_a_cancelled_coroutine_raises_cancelled_error_in_the_caller(
    background: BackgroundLoop,
) -> None:
    async def cancelled() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(1)

    with pytest.raises(concurrent.futures.CancelledError):  # as run_coroutine_threadsafe's
        background.run(cancelled())


def test_a_timeout_answers_timeout_error_and_the_coroutine_goes_on(
    background: BackgroundLoop,
) -> None:
    finished = threading.Event()

    async def slow() -> None:
        await asyncio.sleep(0.3)
        finished.set()

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        background.run(slow(), timeout=0.05)
    assert time.monotonic() - started < 0.3
    assert finished.wait(5)


def test_calls_from_several_threads_each_get_their_own_answer(background: BackgroundLoop) -> None:
    answers: dict[int, list[int]] = {}

    def call(value: int) -> None:
        answers[value] = [background.run(_where(value))[0] for _ in range(50)]

    threads = [threading.Thread(target=call, args=(value,)) for value in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == {value: [value * 2] * 50 for value in range(8)}
