"""Loading models at start-up: several at once, and saying how it goes
(docs/serving.md#start-up-loading-the-models).

Loads are slow (seconds to minutes: files, weights, warm-up) and independent, so
they run side by side on ``load_threads()`` threads: a server of several models
is ready when its slowest model is, not after the sum of them. A graph being
built hands its models' loads to ``run_load`` inside ``loads_in_parallel()``;
the repository runs the versions it loads through ``as_loaded``. A load that
takes long says so every ``PROGRESS_SECONDS`` (``reporting_progress``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

__all__ = [
    "LOAD_THREADS_ENV",
    "PROGRESS_SECONDS",
    "as_loaded",
    "load_threads",
    "loads_in_parallel",
    "reporting_progress",
    "run_load",
]

T = TypeVar("T")

LOAD_THREADS_ENV = "MLSERVE_LOAD_THREADS"
# How often a load still running is reported ("still loading model m (20 s)").
PROGRESS_SECONDS = 10.0

# The loads of the graph being built, gathered to run together (None: load at once).
_gathered: ContextVar[list[Callable[[], object]] | None] = ContextVar(
    "mlserve_gathered_loads", default=None
)


def load_threads() -> int:
    """How many loads run at once: ``MLSERVE_LOAD_THREADS``, else min(4, CPUs)."""
    value = os.environ.get(LOAD_THREADS_ENV, "").strip()
    if not value:
        return min(4, os.cpu_count() or 1)
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{LOAD_THREADS_ENV} must be a whole number of 1 or more, got {value!r}")
    return int(value)


def as_loaded(calls: Sequence[Callable[[], T]]) -> Iterator[tuple[int, T]]:
    """Run ``calls``, ``load_threads()`` at a time, and yield ``(index, result)`` as
    each ends (in the caller's thread, so that it may publish what loaded). A call
    that raises raises here; the calls already started run to their end first."""
    threads = min(load_threads(), len(calls))
    if threads <= 1:
        for index, call in enumerate(calls):
            yield index, call()
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="mlserve-load")
    try:
        futures = {pool.submit(call): index for index, call in enumerate(calls)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_load(call: Callable[[], object]) -> None:
    """Run a model's load now, or, inside ``loads_in_parallel()``, with the others."""
    gathered = _gathered.get()
    if gathered is None:
        call()
    else:
        gathered.append(call)


@contextmanager
def loads_in_parallel() -> Iterator[None]:
    """The loads handed to ``run_load`` in the body run after it, side by side;
    this returns once all have ended."""
    gathered: list[Callable[[], object]] = []
    token = _gathered.set(gathered)
    try:
        yield
    finally:
        _gathered.reset(token)
    for _ in as_loaded(gathered):
        pass


@contextmanager
def reporting_progress(report: Callable[[float], None]) -> Iterator[None]:
    """Call ``report(seconds so far)`` every ``PROGRESS_SECONDS`` until the body ends."""
    done = threading.Event()
    started = time.monotonic()
    every = PROGRESS_SECONDS

    def tick() -> None:
        while not done.wait(every):
            report(time.monotonic() - started)

    threading.Thread(target=tick, daemon=True, name="mlserve-load-progress").start()
    try:
        yield
    finally:
        done.set()
