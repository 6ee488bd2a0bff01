"""Server-side limits: per-request timeout, per-model concurrency, drain timeout.

One slow model must not starve the others (S13): every model gets its own
threads for sync ``predict`` and its own bounded queue; past the queue a call
answers 429 with ``Retry-After`` at once instead of waiting behind the rest.
A request that runs past the timeout answers 504; the model's later result is
dropped. Each setting is a CLI flag and an environment variable.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import resource
import statistics
import time
import weakref
from asyncio.events import _get_running_loop
from asyncio.tasks import _current_tasks
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, fields
from functools import partial
from types import CoroutineType, coroutine
from typing import Any

from mlserve.protocol.errors import Timeout, TooManyRequests
from mlserve.server.aio import WorkerPool
from mlserve.server.events import HTTP_TRIGGERS

__all__ = [
    "DEFAULTS",
    "ModelGate",
    "Overloaded",
    "RequestTimeout",
    "ServerLimits",
    "add_limit_flags",
    "server_limits",
]

logger = logging.getLogger("mlserve.limits")

# Seconds a 429 asks the client to wait before retrying.
RETRY_AFTER_SECONDS = 1


class Overloaded(TooManyRequests):
    """A model's queue is full: 429 with ``Retry-After``."""

    retry_after = RETRY_AFTER_SECONDS


class RequestTimeout(Timeout):
    """The request ran past the server's request timeout: 504."""


@dataclass(frozen=True)
class ServerLimits:
    """The limits a GraphServer applies; 0 turns a limit off (but model_concurrency).

    request_timeout: seconds a request may take (504 past it).
    model_concurrency: sync predict calls one model runs at once (its own threads).
    model_queue: calls that may wait for a model's thread; more answer 429.
    drain_timeout: seconds requests in flight get to finish after SIGTERM.
    drain_delay: seconds after SIGTERM during which readiness is already 503 but
        requests are still taken (a load balancer's time to notice).
    inline_predict_us: a sync model whose calls take a median under this many
        microseconds runs on the event loop, where a thread hop costs more than
        the call (see ModelGate).
    """

    request_timeout: float = 60.0
    model_concurrency: int = 32
    model_queue: int = 512
    drain_timeout: float = 30.0
    drain_delay: float = 0.0
    inline_predict_us: float = 200.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **given: Any) -> ServerLimits:
        """Defaults, overridden by ``MLSERVE_<NAME>`` variables, overridden by ``given``
        (None values in ``given`` are ignored)."""
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for item in fields(cls):
            kind = float if item.type in ("float", float) else int
            raw = environ.get(f"MLSERVE_{item.name.upper()}")
            if raw is not None:
                try:
                    values[item.name] = kind(raw)
                except ValueError:
                    name = f"MLSERVE_{item.name.upper()}"
                    raise ValueError(f"{name}={raw!r} is not a number") from None
            if given.get(item.name) is not None:
                values[item.name] = kind(given[item.name])
        for name, value in values.items():
            if name == "model_concurrency" and value < 1:
                raise ValueError(f"model_concurrency must be 1 or more, got {value}")
            if value < 0:
                raise ValueError(f"{name} must be 0 (off) or more, got {value}")
        return cls(**values)


DEFAULTS = ServerLimits()

_FLAG_HELP = {
    "request_timeout": "seconds a request may take before it answers 504 (0: no limit)",
    "model_concurrency": "sync predict calls one model runs at once, on its own threads",
    "model_queue": "calls that may wait for a busy model; more answer 429 (Retry-After)",
    "drain_timeout": "seconds requests in flight get to finish after SIGTERM (0: no limit)",
    "drain_delay": "seconds after SIGTERM that readiness is 503 while requests are still taken",
    "inline_predict_us": "a sync predict whose calls take a median under this many us runs on "
    "the event loop, until one call takes 50 times that (0: always on threads)",
}


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """``--request-timeout`` and the rest; each defaults to ``MLSERVE_<NAME>`` or DEFAULTS."""
    for item in fields(ServerLimits):
        default = getattr(DEFAULTS, item.name)
        parser.add_argument(
            "--" + item.name.replace("_", "-"),
            type=type(default),
            default=None,
            help=f"{_FLAG_HELP[item.name]} (env MLSERVE_{item.name.upper()}, default {default})",
        )


def server_limits(args: argparse.Namespace) -> ServerLimits:
    """The limits the command line and the environment ask for; a bad value exits
    with its message."""
    try:
        return ServerLimits.from_env(
            **{f.name: getattr(args, f.name) for f in fields(ServerLimits)}
        )
    except ValueError as exc:
        raise SystemExit(f"mlserve serve: {exc}") from None


# Calls a sync model makes on its threads, timed, before it may run on the loop; how
# many times the inline bound one call on the loop may take before the model goes back
# to its threads; and how many times it is measured there again (a stall may be the
# machine's: a busy host, the GIL handed to another thread) before it stays for good.
WARM_CALLS = 8  # first calls pay for lazy imports and cold caches: not counted
LEARN_CALLS = 32
STALL_FACTOR = 50
RELEARNS = 3


class _GcClock:
    """Nanoseconds the process has spent in garbage collections, on any thread: a
    full collection (tens of ms in a big process) is nobody's call's doing."""

    def __init__(self) -> None:
        self.total = 0
        self._started = 0
        self.installed = False

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        else:
            self.total += time.perf_counter_ns() - self._started

    def install(self) -> None:
        if not self.installed:
            self.installed = True
            gc.callbacks.append(self)


_gc_clock = _GcClock()


class InlineRule:
    """Whether sync user code runs on the event loop: measured, and measured again.

    A model's (ModelGate) or a sync flow step's first calls run on threads and are
    timed (``threaded``); once their median CPU time is under ``inline_ns`` and none
    waited, ``inline`` turns on and its calls run on the loop (``run_inline``). An
    inline call that takes ``STALL_FACTOR`` times the bound, computing or waiting,
    turns it off: the calls go back to threads, where they are timed again (a code
    that has turned slow stays there; a stall that was the machine's, not the code's,
    costs only those timed calls), ``RELEARNS`` times at most, then for good. Time the
    process spent collecting garbage meanwhile is not counted: a full collection
    would make any call look slow.
    """

    what = "model"  # for the log

    def __init__(self, inline_ns: int = 0, name: str = "", what: str = "model") -> None:
        self.inline_ns = inline_ns  # 0: never inline
        self.inline = False
        self.name = name
        self.what = what
        self._learnt = False
        self._samples: list[tuple[int, int]] = []
        self.stalls = 0

    def run_inline(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run sync ``fn(*args)`` here, on the loop (only while ``inline``), as on a
        thread: with no running loop in sight (so ``asyncio.run`` works as there)."""
        before = resource.getrusage(resource.RUSAGE_THREAD)
        loop = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(None)
        collected = _gc_clock.total
        start = time.perf_counter_ns()
        try:
            return fn(*args)
        finally:
            took = time.perf_counter_ns() - start
            asyncio.events._set_running_loop(loop)
            if took > self.inline_ns * STALL_FACTOR:
                collected = _gc_clock.total - collected
                if took - collected > self.inline_ns * STALL_FACTOR:
                    self._stalled(took - collected, before, collected)

    def _stalled(self, took: int, before: Any, collected: int) -> None:
        """A long call on the loop: if it computed or blocked (I/O, a sleep, a lock, or
        the GIL handed to another thread) it goes back to threads, to be timed again
        (``RELEARNS`` times, then for good); if another process had the core, it stays."""
        after = resource.getrusage(resource.RUSAGE_THREAD)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        blocked = after.ru_nvcsw > before.ru_nvcsw  # voluntary switches: it waited
        if cpu * 1e9 - collected <= self.inline_ns * STALL_FACTOR and not blocked:
            return
        self.inline = False
        self.stalls += 1
        if self.stalls > RELEARNS:
            self.inline_ns = 0  # never again
        else:
            self._learnt, self._samples = False, []  # timed on threads again
        logger.info(
            "%s %s: a call took %.1f ms on the event loop: it runs on threads %s",
            self.what,
            self.name,
            took / 1e6,
            "from now on" if self.inline_ns == 0 else "and is measured again",
        )

    def threaded(self, call: Callable[[], Any]) -> Callable[[], Any]:
        """What a thread runs for ``call``: ``call``, timed while the rule learns."""
        return partial(self._timed, call) if self.inline_ns and not self._learnt else call

    def _timed(self, call: Callable[[], Any]) -> Any:
        """``call()`` on a thread, timed while the rule learns.

        CPU time says what a call costs; wall time also counts its waits: on I/O or
        a lock (which must not hold the loop) and for the GIL (long while the loop
        is busy): the least a call waited tells the first kind from the second.
        """
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        try:
            return call()
        finally:
            cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
            samples = self._samples
            samples.append((cpu, wall - cpu))
            if len(samples) >= WARM_CALLS + LEARN_CALLS and not self._learnt:
                self._learnt = True
                learnt = samples[WARM_CALLS : WARM_CALLS + LEARN_CALLS]
                cpu = statistics.median(c for c, _ in learnt)
                waited = min(w for _, w in learnt)
                self.inline = cpu <= self.inline_ns and waited <= self.inline_ns
                if self.inline:
                    _gc_clock.install()
                logger.info(
                    "%s %s: a call takes %.0f us of CPU (median), waits %.0f us or more: %s",
                    self.what,
                    self.name,
                    cpu / 1000,
                    waited / 1000,
                    "it runs on the event loop" if self.inline else "it stays on threads",
                )


@dataclass
class ModelGate(InlineRule):
    """One model's concurrency budget: its own worker threads (sync predict) or a
    semaphore (async predict), and a bounded queue.

    A sync model's first calls run on its threads and are timed. When their median
    CPU time is under ``inline_ns`` (a light model: decode, predict and encode in
    tens of microseconds) and they do not wait on I/O, the hop to a thread and back
    costs more than the call itself, and the GIL serialises the two anyway, so its
    calls run inline on the event loop (``inline``). Such a call holds the loop no
    longer than a request's parse does; an inline call that takes ``STALL_FACTOR``
    times the bound, computing or waiting, sends the model back to its threads to be
    measured again (``InlineRule``), so a model that turns slow stalls the loop at most
    ``RELEARNS + 1`` times.
    """

    concurrency: int
    queue: int
    inline_ns: int = 0  # 0: never inline
    admitted: int = 0  # calls running or waiting for a thread
    inline: bool = False
    name: str = ""  # the model's, for the log
    _learnt: bool = field(default=False, init=False, repr=False)
    _samples: list[tuple[int, int]] = field(default_factory=list, init=False, repr=False)
    stalls: int = field(default=0, init=False, repr=False)
    _pool: WorkerPool = field(init=False, repr=False)
    _slots: asyncio.Semaphore | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._pool = WorkerPool(max_workers=self.concurrency)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run sync ``fn(*args)`` on this model's threads, or answer 429 if its queue is full.

        The slot is freed when the call ends, even if the awaiting request timed
        out first: a timed-out call still holds its thread.
        """
        self._admit()
        loop = asyncio.get_running_loop()
        future = self._pool.submit(loop, self.threaded(partial(fn, *args)))
        future.add_done_callback(self._release)
        return await asyncio.shield(future)

    async def run_async(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await an async model's call: at most ``concurrency`` at once, ``queue`` waiting,
        429 past that."""
        try:
            self._admit()
        except Overloaded:
            coro.close()
            raise
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        try:
            async with self._slots:
                return await coro
        finally:
            self.admitted -= 1

    def _admit(self) -> None:
        """Count one more call in, or refuse it: 429 once threads and queue are all taken."""
        if self.admitted >= self.concurrency + self.queue:
            raise Overloaded(
                f"the model is busy ({self.admitted} calls running or queued), retry later"
            )
        self.admitted += 1

    def _release(self, future: asyncio.Future[Any]) -> None:
        self.admitted -= 1
        if not future.cancelled():
            future.exception()  # retrieved: a timed-out call's error is not "never retrieved"


def gate_of(model: Any, limits: ServerLimits) -> ModelGate:
    """The model's gate, made on first use."""
    gate: ModelGate | None = getattr(model, "_gate", None)
    if gate is None:
        inline_ns = int(limits.inline_predict_us * 1000)
        gate = ModelGate(limits.model_concurrency, limits.model_queue, inline_ns)
        gate.name = str(getattr(model, "name", ""))
        model._gate = gate
    return gate


def limits_of(context: Any) -> ServerLimits:
    """The limits of the server a step runs in (the defaults outside a server)."""
    limits = getattr(getattr(context, "server", None), "limits", None)
    return limits if isinstance(limits, ServerLimits) else DEFAULTS


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
def _resumed(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    """The rest of ``coro``, which suspended on ``waiting`` at its first step: what the
    task sends or throws in (a cancel) goes on to ``coro``, what it yields goes up."""
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


def request_timeout(limits: ServerLimits, event: Any) -> float:
    """The deadline of an event: requests (HTTP, gRPC, mock) have one; stream events
    (Kafka, cron) may wait for a model to load."""
    return limits.request_timeout if event.trigger.kind in HTTP_TRIGGERS else 0.0
