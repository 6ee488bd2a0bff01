"""Running the one async core from sync callers, and sync user code off the loop."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from mlserve.core import tracing

__all__ = ["BackgroundLoop", "WorkerPool", "drive", "in_thread", "run_in_threadpool"]

T = TypeVar("T")


class _WorkerPool:
    """Threads for sync user code, with a cheaper hand-off than ``run_in_executor``.

    ``loop.run_in_executor`` costs a concurrent Future and an asyncio Future
    chained by callbacks, ThreadPoolExecutor's locks and its Python-level idle
    semaphore. Here a call is one deque append, one loop Future and one
    ``call_soon_threadsafe`` back.

    Waking a parked thread is the dear part (a futex, a context switch and a
    GIL hand-over), so a thread is woken only when no thread is awake looking
    for work ("searching"): the event loop submits a burst of calls in one
    iteration, one woken thread runs them back to back. A slow call never holds
    up another: a thread that takes a call while more wait wakes a searcher
    first (a parked thread, or a new one up to ``max_workers``).
    """

    def __init__(self, max_workers: int) -> None:
        self._calls: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._parked: list[threading.Lock] = []  # each held: its thread sleeps on it
        self._max_workers = max_workers
        self._threads = 0
        self._searching = 0

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> asyncio.Future[Any]:
        if tracing.carry:  # the caller's span and request id go on in
            fn = partial(tracing.copy_context().run, fn)  # the thread (hooks are children)
        future = loop.create_future()
        self._calls.append((loop, future, fn))
        with self._lock:
            if not self._searching:
                self._wake()
        return future

    def _wake(self) -> None:
        """Get one more thread searching (holding ``_lock``); none past ``max_workers``."""
        if self._parked:
            self._searching += 1
            self._parked.pop().release()
        elif self._threads < self._max_workers:
            self._searching += 1
            self._threads += 1
            name = f"mlserve-worker-{self._threads}"
            threading.Thread(target=self._work, daemon=True, name=name).start()

    def _work(self) -> None:
        parking = threading.Lock()
        calls, lock = self._calls, self._lock
        while True:
            try:
                loop, future, fn = calls.popleft()
            except IndexError:
                with lock:
                    if calls:
                        continue
                    self._searching -= 1
                    parking.acquire()
                    self._parked.append(parking)
                parking.acquire()  # until _wake releases it
                parking.release()
                continue
            with lock:
                self._searching -= 1
                if calls and not self._searching:
                    self._wake()
            try:
                result, error = fn(), None
            except BaseException as exc:  # handed to the awaiting task, as run_in_executor does
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed while we worked
                loop.call_soon_threadsafe(_settle, future, result, error)
            del loop, future, fn, result, error
            with lock:
                self._searching += 1


def _settle(future: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


# Each model's sync predict has a pool of its own (mlserve.core.limits); this one runs
# the rest of the blocking work (loading, sync steps, big bodies' parsing), never on the
# event loop: up to 32 calls at once, more queue. MLSERVE_WORKER_THREADS changes it.
WorkerPool = _WorkerPool

_workers = _WorkerPool(max_workers=int(os.environ.get("MLSERVE_WORKER_THREADS", "32")))


async def run_in_threadpool(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run sync ``fn`` in the worker pool and await its result."""
    loop = asyncio.get_running_loop()
    call = partial(fn, *args, **kwargs) if kwargs else partial(fn, *args)
    return await _workers.submit(loop, call)


def drive(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, synchronously.

    Code paths shared by the sync and async APIs are written once as
    coroutines; the sync API passes them sync callables and drives them here.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("an async step was reached from a sync call")


async def in_thread(fn: Callable[..., Any], *args: object) -> Any:
    """Await ``fn(*args)``: a coroutine function is awaited, anything else runs in the pool."""
    result = await run_in_threadpool(fn, *args)
    if isinstance(result, Awaitable):
        return await result
    return result


class _Handoff:
    """One coroutine run on the background loop for a waiting thread.

    Cheaper than ``run_coroutine_threadsafe``: no concurrent Future (its Condition
    and a new lock per wait), no callbacks chaining it to the task's Future, and no
    turn of the loop for the task's done-callbacks: the task's coroutine releases
    the caller's lock itself as it ends.
    """

    __slots__ = ("_coro", "_done", "_error", "_result", "_task")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._done = threading.Lock()
        self._done.acquire()
        self._result: Any = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """On the loop: the task that runs the coroutine (in the caller's context),
        held here while the caller waits."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            self._result = await self._coro
        except asyncio.CancelledError:  # what run_coroutine_threadsafe's caller gets
            self._error = concurrent.futures.CancelledError()
        except BaseException as exc:  # handed to the waiting thread, as a Future would
            self._error = exc
        finally:
            self._done.release()

    def wait(self, timeout: float | None) -> Any:
        if not self._done.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"no answer from the event loop in {timeout:g} s")
        error, self._error = self._error, None
        if error is not None:
            try:
                raise error
            finally:
                del error  # no cycle through the traceback's frames
        return self._result


class BackgroundLoop:
    """An event loop on a daemon thread, for sync callers (scripts, notebooks)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._loop.run_forever, daemon=True, name="mlserve-loop"
                )
                thread.start()
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop; this thread waits for its result (TimeoutError
        after ``timeout`` seconds, the coroutine going on)."""
        call = _Handoff(coro)
        self.loop.call_soon_threadsafe(call.start)
        return call.wait(timeout)

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
