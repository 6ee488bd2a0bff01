"""Shadow routes: a model that gets a copy of another model's requests and never
answers them (docs/graphs.md#shadow-routes).

A copy runs after the primary answered: on a server, as a task of the event loop once
the answer is handed to the face (through the route's async API, so a sync model takes
its usual road: inline when proven cheap, else its own threads); in a caller's thread
(the mock server), on the shadow's own thread. Past a bound of copies under way a copy
is dropped (counted): a slow shadow never delays the caller nor grows without bound.
Its errors stay here (counted). Each answer is compared with the primary's (equal, or
within a tolerance for numbers) and the counts are kept per shadow, where ``/metrics``
reads them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlserve.core.events import Event
from mlserve.core.shadow_call import expect_shadow, forget_shadow

__all__ = ["SHADOW_QUEUE", "ShadowCounts", "ShadowRunner", "outputs_agree", "shadow_counts"]

logger = logging.getLogger("mlserve.graph")

SHADOW_QUEUE = 100  # copies waiting for a shadow before new ones are dropped
IDLE_SECONDS = 60.0  # a shadow's thread ends after this long without copies (a new one starts)


class ShadowCounts:
    """One shadow's comparisons with its primary, and the copies it dropped."""

    __slots__ = ("agree", "disagree", "dropped", "error")

    def __init__(self) -> None:
        self.agree = 0
        self.disagree = 0
        self.error = 0
        self.dropped = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "agree": self.agree,
            "disagree": self.disagree,
            "error": self.error,
            "dropped": self.dropped,
        }


_RUNNERS: weakref.WeakSet[ShadowRunner] = weakref.WeakSet()  # every runner of this process


def shadow_counts() -> dict[str, ShadowCounts]:
    """Every shadow's counts, by its route key, summed over the routers that run it
    (for ``/metrics``)."""
    totals: dict[str, ShadowCounts] = {}
    for runner in list(_RUNNERS):
        total = totals.setdefault(runner.key, ShadowCounts())
        for name in ShadowCounts.__slots__:
            setattr(total, name, getattr(total, name) + getattr(runner.counts, name))
    return totals


def _outputs(answer: Any) -> Any:
    if isinstance(answer, dict) and "outputs" in answer:
        return answer["outputs"]
    return answer


def _same(a: Any, b: Any, tolerance: float) -> bool:
    if hasattr(a, "tolist"):
        a = a.tolist()
    if hasattr(b, "tolist"):
        b = b.tolist()
    if isinstance(a, bool) or isinstance(b, bool):  # True is not 1 here
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or math.isclose(a, b, rel_tol=0.0, abs_tol=tolerance)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y, tolerance) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], tolerance) for k in a)
    return bool(a == b)


def outputs_agree(primary: Any, shadow: Any, tolerance: float = 0.0) -> bool:
    """Whether two answers' outputs agree: equal, numbers within ``tolerance``."""
    return _same(_outputs(primary), _outputs(shadow), tolerance)


@dataclass(frozen=True, slots=True)
class _Copy:
    """A request copied for a shadow, and the primary's answer to it."""

    body: Any
    path: str
    method: str
    headers: dict[str, Any]
    content_type: str
    event_id: str
    answer: Any


class ShadowRunner:
    """Runs one shadow route's copies: on the loop, or on its own thread, one at a time."""

    def __init__(
        self,
        key: str,
        route_of: Callable[[str], Any],
        max_queue: int = SHADOW_QUEUE,
        tolerance: float = 0.0,
    ) -> None:
        self.key = key
        self.tolerance = tolerance
        self.counts = ShadowCounts()
        self._route_of = route_of  # the route now served under the key (a load replaces it)
        self._queue: queue.Queue[_Copy | None] = queue.Queue(maxsize=max(1, max_queue))
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._max_queue = max(1, max_queue)
        self._on_loop = 0  # copies under way on the event loop
        self._tasks: set[asyncio.Task[None]] = set()  # held until done
        _RUNNERS.add(self)

    def submit(self, event: Event, body: Any, answer: Any) -> None:
        """Queue a copy of ``event`` (whose request body was ``body``) for the shadow;
        a full queue drops it."""
        copy = _Copy(
            body, event.path, event.method, event.headers, event.content_type, event.id, answer
        )
        try:
            self._queue.put_nowait(copy)
        except queue.Full:
            self.counts.dropped += 1
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, daemon=True, name=f"shadow-{self.key}"
                )
                self._thread.start()

    def submit_on_loop(self, event: Event, body: Any, answer: Any) -> None:
        """``submit`` from the event loop: the copy runs as a task of the loop, through
        the route's async API (a sync model takes its usual road: inline when cheap,
        else its threads); past ``max_queue`` copies under way, it is dropped."""
        if self._on_loop >= self._max_queue:
            self.counts.dropped += 1
            return
        self._on_loop += 1
        copy = _Copy(
            body, event.path, event.method, event.headers, event.content_type, event.id, answer
        )
        task = asyncio.get_running_loop().create_task(self._run_on_loop(copy))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_on_loop(self, copy: _Copy) -> None:
        primary = _outputs(copy.answer)
        expected: list[tuple[int, str]] = []
        try:
            route = self._route(copy, primary, expected)
            answer = (await route.run_async(_event(copy))).body
        except Exception as exc:
            self._failed(exc)
            return
        finally:
            self._on_loop -= 1
            forget_shadow(expected)
        self._compare(primary, answer)

    def _route(self, copy: _Copy, primary: Any, expected: list[tuple[int, str]]) -> Any:
        """The shadow's route, its calls of this copy announced to the model-log stream."""
        route = self._route_of(self.key)
        if route is None:
            raise LookupError(f"route {self.key} is not served")
        ids = {copy.event_id}
        if isinstance(copy.body, dict) and copy.body.get("id") is not None:
            ids.add(str(copy.body["id"]))  # the model answers with the request's own id
        expected += expect_shadow(route.iter_models(), ids, primary)
        return route

    def _failed(self, exc: Exception) -> None:
        self.counts.error += 1
        level = logging.WARNING if self.counts.error == 1 else logging.DEBUG
        logger.log(level, "shadow %s failed (the caller never sees it): %s", self.key, exc)

    def _compare(self, primary: Any, answer: Any) -> None:
        if outputs_agree(primary, answer, self.tolerance):
            self.counts.agree += 1
        else:
            self.counts.disagree += 1

    def pending(self) -> int:
        """Copies waiting (not counting the one running)."""
        return self._queue.qsize()

    def close(self) -> None:
        """Stop the thread after the copies already queued."""
        if self._thread is not None:
            self._queue.put(None)

    def _work(self) -> None:
        while True:
            try:
                copy = self._queue.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:  # idle: end, unless a copy came meanwhile
                    if self._queue.empty():
                        self._thread = None
                        break
                continue
            if copy is None:
                break
            self._run(copy)
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _run(self, copy: _Copy) -> None:
        primary = _outputs(copy.answer)
        expected: list[tuple[int, str]] = []
        try:
            answer = self._call(copy, self._route(copy, primary, expected)).body
        except Exception as exc:
            self._failed(exc)
            return
        finally:
            forget_shadow(expected)
        self._compare(primary, answer)

    def _call(self, copy: _Copy, route: Any) -> Event:
        """The shadow's answer: a sync model runs on this thread, an async one on this
        thread's own loop."""
        try:
            result: Event = route.run(_event(copy))
            return result
        except RuntimeError as exc:
            if "async step" not in str(exc):
                raise
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        result = self._loop.run_until_complete(route.run_async(_event(copy)))
        return result


def _event(copy: _Copy) -> Event:
    body = copy.body
    if isinstance(body, dict):  # the model may change it: each run gets its own
        body = dict(body)
    return Event(
        body, copy.content_type, dict(copy.headers), copy.method, copy.path, copy.event_id, "shadow"
    )
