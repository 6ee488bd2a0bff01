"""One model's concurrency budget: its threads, its async slots, its bounded queue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from mlserve.core.aio import WorkerPool
from mlserve.core.inline_rule import InlineRule
from mlserve.core.limits import Overloaded, ServerLimits

__all__ = ["ModelGate", "gate_of"]


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

    def __init__(self, concurrency: int, queue: int, inline_ns: int = 0, name: str = "") -> None:
        super().__init__(inline_ns, name)
        self.concurrency = concurrency
        self.queue = queue
        self.admitted = 0  # calls running or waiting for a thread
        self._pool = WorkerPool(max_workers=concurrency)
        self._slots: asyncio.Semaphore | None = None

    async def run(self, fn: Callable[..., Any], *args: object) -> Any:
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
            coro.close()  # not awaited when a deadline cancelled the wait for a slot

    async def enter(self) -> None:
        """Count in a call that outlives this await (a stream): it takes one of the
        ``concurrency`` slots (``queue`` wait, 429 past that) until ``leave``."""
        self._admit()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        try:
            await self._slots.acquire()
        except BaseException:
            self.admitted -= 1
            raise

    def leave(self) -> None:
        """The call counted in by ``enter`` has ended (on the loop)."""
        self.admitted -= 1
        if self._slots is not None:
            self._slots.release()

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
        name = str(getattr(model, "name", ""))
        gate = ModelGate(limits.model_concurrency, limits.model_queue, inline_ns, name)
        model._gate = gate
    return gate
