"""Request deadlines: one timer per event loop sweeps the requests that have one.

``with_timeout`` arms a request's deadline only once its coroutine first waits,
so a request answered inline pays for no timer (docs/serving.md#limits-and-graceful-stop).
"""

from __future__ import annotations

import asyncio
import asyncio.events
import asyncio.tasks
import weakref
from collections.abc import Callable, Coroutine
from types import CoroutineType, coroutine
from typing import Any

from mlserve.core.limits import RequestTimeout

# asyncio's private look-ups (C functions and a dict), bound once: typeshed declares no
# ``_current_tasks``, and a running loop's ``_get_running_loop`` (a coroutine's) never
# answers None.
_get_running_loop: Callable[[], asyncio.AbstractEventLoop] = vars(asyncio.events)[
    "_get_running_loop"
]
_current_tasks: dict[asyncio.AbstractEventLoop, asyncio.Task[Any]] = vars(asyncio.tasks)[
    "_current_tasks"
]

__all__ = ["SWEEP_SECONDS", "with_timeout"]

# How often in-flight requests are checked against their deadline: a deadline
# fires up to this late. A timer per request (asyncio.timeout) cost ~10 us each.
SWEEP_SECONDS = 0.1


class _Deadlines:
    """The request tasks of one event loop that have a deadline, checked by one timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # [deadline, its seconds, with_timeout calls of the task waiting under it]
        self.tasks: dict[asyncio.Task[Any], list[Any]] = {}
        self.expired: dict[asyncio.Task[Any], float] = {}  # cancelled: the seconds they had
        self.timer: asyncio.TimerHandle | None = None

    def sweep(self) -> None:
        now = self.loop.time()
        for task, (deadline, seconds, _) in list(self.tasks.items()):
            if deadline <= now:
                del self.tasks[task]
                self.expired[task] = seconds
                task.cancel()
        self.timer = self.loop.call_later(SWEEP_SECONDS, self.sweep) if self.tasks else None


_deadlines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = (
    weakref.WeakKeyDictionary()
)


_last: list[_Deadlines] = []  # the loop last asked about (usually the only one)


def _deadlines_of(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    last = _last[0] if _last else None
    if last is not None and last.loop is loop:
        return last
    deadlines = _deadlines.get(loop)
    if deadlines is None:
        deadlines = _deadlines[loop] = _Deadlines(loop)
    _last[:] = [deadlines]
    return deadlines


# The running loop's current task: asyncio.current_task is Python code on 3.11 (the
# package's Python), a frame per request; the dict it reads is C.
_current_task: Callable[[Any], Any] = _current_tasks.get


async def with_timeout(awaitable: Any, seconds: float) -> Any:
    """``await awaitable``, or RequestTimeout (504) after ``seconds`` (0: no limit).

    A coroutine runs its first step before any deadline is armed: a request answered
    without waiting (an inline model) never needs one (nor the running loop: asking
    for it is a getpid() system call), and one that waits gets it from when it first
    waits. Nested calls in one task share one deadline, the earliest, until the
    outermost ends.
    """
    if not seconds:
        return await awaitable
    if type(awaitable) is CoroutineType:
        try:
            waiting = awaitable.send(None)
        except StopIteration as done:
            return done.value
        awaitable = _resumed(awaitable, waiting)
    loop = _get_running_loop()
    deadline = loop.time() + seconds
    task = _current_task(loop)
    if task is None:
        return await awaitable
    deadlines = _deadlines_of(loop)
    tasks = deadlines.tasks
    held = tasks.get(task)
    if held is None:
        tasks[task] = [deadline, seconds, 1]
        if deadlines.timer is None:
            deadlines.timer = loop.call_later(SWEEP_SECONDS, deadlines.sweep)
    else:  # nested (an inner call armed first, in this call's first step)
        held[2] += 1
        if deadline < held[0]:
            held[0], held[1] = deadline, seconds
    try:
        return await awaitable
    except asyncio.CancelledError:
        if task not in deadlines.expired:
            raise
        had = deadlines.expired.pop(task)
        task.uncancel()
        raise RequestTimeout(f"the request took longer than {had:g} s") from None
    finally:
        held = tasks.get(task)
        if held is not None:
            held[2] -= 1
            if not held[2]:
                del tasks[task]
        if task in deadlines.expired:  # a cancel the awaited code swallowed: the task
            del deadlines.expired[task]  # goes on uncancelled (a stream's, a consumer's)
            task.uncancel()


@coroutine
def _resumed(coro: Coroutine[Any, Any, Any], waiting: object) -> Any:
    """The rest of ``coro``, which suspended on ``waiting`` at its first step: what the
    task sends or throws in (a cancel) goes on to ``coro``, what it yields goes up."""
    step: Callable[[Any], Any]
    while True:
        try:
            sent = yield waiting
        except BaseException as exc:  # a cancel (or a close) goes on into the coroutine
            step, value = coro.throw, exc
        else:
            step, value = coro.send, sent
        try:
            waiting = step(value)
        except StopIteration as done:
            return done.value
