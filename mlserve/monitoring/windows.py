"""Tumbling windows over the model-log stream: each endpoint's calls, counted once
(docs/monitoring.md#windows).

Windows are aligned on the epoch (``[k*W, (k+1)*W)`` by a record's ``when``), so
every endpoint of a stream shares their edges. One ``PartitionWindows`` keeps the
open windows of one partition of the stream (a Kafka partition; the whole file or
Redis stream otherwise). The partition closes every window that ends before its
*boundary*, which moves forward with the newest ``when`` read minus ``grace`` (a
record late by less than ``grace`` still joins its window), or with the clock when
nothing arrived for ``grace`` seconds (so a quiet endpoint still gets its window).
A record whose window is already closed is *late*: it joins the first open window
and is counted there as late. Every record is counted in exactly one window.

Nothing lost, nothing counted twice across a crash: the results of the windows a
close ends are written together with the partition's ``state`` (its boundary and
the recent closes, each with the stream position read when it happened). The
stream is committed at the start of the oldest record still in an open window, so
a restarted monitor reads again only records of open windows or records counted
in windows it already wrote; ``PartitionWindows.counted`` recognises the latter
from the state: a record read before a close was counted by it when the window it
joined then ended at or before that close's boundary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = [
    "MAX_CLOSES",
    "ClosedWindow",
    "PartitionWindows",
    "Window",
    "epoch_of",
    "input_rows",
    "position_order",
]

logger = logging.getLogger("mlserve.monitoring")

MAX_CLOSES = 64
MAX_TRACE_IDS = 20  # the traces a window keeps (its first ones): an alert links to them
"""Closes kept in a partition's state, for a restarted monitor to tell counted records."""

_SECONDS: dict[str, float] = {}  # "YYYY-MM-DDTHH:MM:SS" -> epoch seconds (a per-second cache)


def epoch_of(when: str) -> float:
    """A record's ISO ``when`` as epoch seconds; the whole seconds of a stamp are parsed
    once (records of one second share them), the fraction by slicing."""
    if len(when) != 32 or not when.endswith("+00:00") or when[19] != ".":
        stamp = datetime.fromisoformat(when)  # not the pusher's form: parsed in full each time
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    head = when[:19]
    base = _SECONDS.get(head)
    if base is None:
        stamp = datetime.fromisoformat(when)
        if len(_SECONDS) > 4096:
            _SECONDS.clear()
        base = _SECONDS[head] = float(math.floor(stamp.timestamp()))
    return base + int(when[20:26]) * 1e-6


def position_order(position: int | str) -> Any:
    """A stream position as a comparable key: an offset, or a Redis id ``"ms-seq"``."""
    if isinstance(position, int):
        return position
    ms, _, seq = str(position).partition("-")
    return (int(ms), int(seq or 0))


def input_rows(inputs: object) -> list[list[Any]] | None:
    """A logged request's feature rows (column *i* is feature *i*): a list of rows, or
    one flat row; None when the inputs are not tabular (several tensors, images)."""
    if type(inputs) is not list or not inputs:
        return None
    first = inputs[0]
    if type(first) is list:
        if first and type(first[0]) is list:
            return None
        return inputs
    if type(first) is dict:
        return None
    return [inputs]


@dataclass(slots=True)
class Window:
    """One endpoint's calls in one window."""

    uid: str
    start: float
    head: dict[str, Any]
    """The first record's fields (model, version, function_uri...): names a new endpoint."""
    first_position: Any
    """Where the stream resumes to read this window's first record again."""
    requests: int = 0
    errors: int = 0
    late: int = 0
    latencies: list[int] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    last_when: str = ""
    trace_ids: list[str] = field(default_factory=list)
    """The first ``MAX_TRACE_IDS`` traces of the window's calls (docs/observability.md#tracing)."""


@dataclass(slots=True)
class ClosedWindow:
    """A window a close ended, with what the monitor reports of it."""

    window: Window
    end: float

    def summary(self) -> dict[str, Any]:
        """The window's metrics, as written to ``status.window``."""
        window = self.window
        seconds = self.end - window.start
        latencies = sorted(window.latencies)
        return {
            "start": _iso(window.start),
            "end": _iso(self.end),
            "requests": window.requests,
            "errors": window.errors,
            "late": window.late,
            "latency_mean_us": sum(latencies) / len(latencies) if latencies else None,
            "latency_p50_us": _quantile(latencies, 0.5),
            "latency_p99_us": _quantile(latencies, 0.99),
            "predictions_per_second": (window.requests - window.errors) / seconds,
            "trace_ids": list(window.trace_ids),
        }


def _quantile(ordered: list[int], q: float) -> float | None:
    """numpy's default (linear) quantile of sorted values."""
    if not ordered:
        return None
    at = (len(ordered) - 1) * q
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


class PartitionWindows:
    """The open windows of one stream partition (see the module docstring).

    ``uid_of(record)`` names a record's endpoint; ``resume_at(value, position)`` gives
    the position from which a record is read again (the source's own rule).
    """

    def __init__(
        self,
        partition: int,
        window: float,
        grace: float,
        uid_of: Callable[[dict[str, Any]], str],
        resume_at: Callable[[bytes, Any], Any],
        state: dict[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        import time

        self.partition = partition
        self.window = float(window)
        self.grace = float(grace)
        self.uid_of = uid_of
        self.resume_at = resume_at
        self.clock = clock or time.time
        state = state or {}
        self.boundary = float(state.get("boundary", 0.0))
        """Every window ending at or before it is closed."""
        self.closes: list[list[Any]] = [list(c) for c in state.get("closes", [])]
        """Recent closes, oldest first: ``[boundary before, boundary after, position read]``."""
        self.closes_read = max((position_order(c[2]) for c in self.closes), default=None)
        """The furthest position a close read: a record read past it is new to every close
        (``counted`` answers it at once, not after a look at each of them)."""
        self.open: dict[tuple[str, float], Window] = {}
        self.newest = 0.0  # the newest ``when`` read
        self.last_read = self.clock()  # when a record last arrived (clock)
        self.position: Any = state.get("position")  # the last position read
        self.counts = {"counted": 0, "malformed": 0, "late": 0, "skipped": 0}

    # ---- reading ---------------------------------------------------------------------

    def add(self, value: bytes, position: Any) -> None:
        """Count one record read at ``position`` (the position after it)."""
        self.last_read = self.clock()
        try:
            record = orjson.loads(value)
            if "values" in record and "headers" in record:
                self._add_batch(record, value, position)
            else:
                self._add_one(record, record, value, position)
        except Exception:
            self.counts["malformed"] += 1
            logger.debug("monitor: a malformed record at %s skipped", position, exc_info=True)
        self.position = position

    def _add_batch(self, record: dict[str, Any], value: bytes, position: Any) -> None:
        headers = record.pop("headers")
        rows = record.pop("values")
        for row in rows:
            self._add_one(record, dict(zip(headers, row, strict=True)), value, position)

    def _add_one(
        self, head: dict[str, Any], call: dict[str, Any], value: bytes, position: Any
    ) -> None:
        when = call["when"]
        at = epoch_of(when)
        uid = self.uid_of(head)
        start = math.floor(at / self.window) * self.window
        if self.closes and self.counted(start, position):
            self.counts["skipped"] += 1
            return
        late = start + self.window <= self.boundary
        if late:
            start = self.boundary  # the first open window (edges are multiples of W)
        window = self.open.get((uid, start))
        if window is None:
            window = self.open[(uid, start)] = Window(
                uid, start, head, self.resume_at(value, position)
            )
        window.requests += 1
        if late:
            window.late += 1
            self.counts["late"] += 1
        if "error" in call:
            window.errors += 1
        else:
            microsec = call.get("microsec")
            if type(microsec) is int:
                window.latencies.append(microsec)
            request = call.get("request")
            rows = input_rows(request.get("inputs") if type(request) is dict else None)
            # not tabular, or an explanation's rows (asked about again, docs/explain.md#
            # monitoring): in the metrics, not in the drift
            if rows is not None and call.get("op") != "explain":
                window.rows.extend(rows)
        trace_id = call.get("trace_id")
        if trace_id and len(window.trace_ids) < MAX_TRACE_IDS:
            window.trace_ids.append(trace_id)
        if when > window.last_when:
            window.last_when = when
        if at > self.newest:
            self.newest = at
        self.counts["counted"] += 1

    def counted(self, start: float, position: Any) -> bool:
        """Whether a record read again (window ``start``, read at ``position``) was
        counted in a window already written: it was read before a close (the first
        whose read position is at or past it), joined a window by the boundary then in
        force, and that window ends at or before the latest boundary."""
        order = position_order(position)
        if order > self.closes_read:
            return False
        for before, _, read in self.closes:
            if position_order(read) >= order:
                joined = before if start + self.window <= before else start
                return joined + self.window <= self.boundary
        return False

    # ---- closing ---------------------------------------------------------------------

    def due(self, now: float | None = None) -> float:
        """The boundary a close would move to now (``self.boundary`` when none is due)."""
        now = self.clock() if now is None else now
        watermark = self.newest - self.grace
        if now - self.last_read >= self.grace:  # nothing arrives: the clock moves it
            watermark = max(watermark, now - self.grace)
        boundary = math.floor(watermark / self.window) * self.window
        return max(boundary, self.boundary)

    def close(self, boundary: float) -> list[ClosedWindow]:
        """End every open window that ends at or before ``boundary``; the caller writes
        them with ``state()`` in one transaction, then commits ``commit_position()``."""
        ended = [w for key, w in self.open.items() if key[1] + self.window <= boundary]
        for window in ended:
            del self.open[(window.uid, window.start)]
        if boundary > self.boundary:
            if self.position is not None:
                self.closes.append([self.boundary, boundary, self.position])
                del self.closes[:-MAX_CLOSES]
                order = position_order(self.position)
                if self.closes_read is None or order > self.closes_read:
                    self.closes_read = order
            self.boundary = boundary
        return [ClosedWindow(window, window.start + self.window) for window in ended]

    def commit_position(self) -> Any:
        """Where a restarted monitor must resume: the oldest open window's first record,
        else after the last record read (None before any record)."""
        firsts = [w.first_position for w in self.open.values()]
        if firsts:
            return min(firsts, key=position_order)
        return self.position

    def state(self) -> dict[str, Any]:
        """What a restarted monitor needs to tell counted records (see ``counted``)."""
        return {"boundary": self.boundary, "closes": self.closes, "position": self.position}
