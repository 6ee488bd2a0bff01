"""Whether sync user code runs on the event loop: measured, and measured again.

A light sync ``predict`` (or flow step) costs less than the hop to a thread and
back; ``InlineRule`` times a callable's first calls on threads and, when they are
cheap and never wait, runs the next ones on the loop, sending them back to threads
when one stalls (docs/serving.md#sync-and-async-models).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["InlineRule", "LEARN_CALLS", "RELEARNS", "STALL_FACTOR", "WARM_CALLS"]

logger = logging.getLogger("mlserve.limits")

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

    def __init__(self, inline_ns: int = 0, name: str = "", what: str = "model") -> None:
        self.inline_ns = inline_ns  # 0: never inline
        self.inline = False
        self.name = name
        self.what = what
        self._learnt = False
        self._samples: list[tuple[int, int]] = []
        self.stalls = 0

    def run_inline(self, fn: Callable[..., Any], *args: object) -> Any:
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
                median = statistics.median(c for c, _ in learnt)
                waited = min(w for _, w in learnt)
                self.inline = median <= self.inline_ns and waited <= self.inline_ns
                if self.inline:
                    _gc_clock.install()
                logger.info(
                    "%s %s: a call takes %.0f us of CPU (median), waits %.0f us or more: %s",
                    self.what,
                    self.name,
                    median / 1000,
                    waited / 1000,
                    "it runs on the event loop" if self.inline else "it stays on threads",
                )
