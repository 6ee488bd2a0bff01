"""The model layer's small door to the Prometheus metrics.

``V2ModelServer`` calls ``model_recorder(name, version).ok(op, elapsed_ns)`` on every
request. A call only appends to a list, without a lock; the counters take the
pending calls in when they are read (or every ``FOLD_AT`` calls), and the families
``mlserve_model_requests``, ``mlserve_model_errors`` and
``mlserve_model_latency_seconds`` are read from them when ``/metrics`` is scraped
(``mlserve.monitoring.metrics``, which reads them; nothing here imports it).
``prometheus_client``'s own children took three locks and a dozen calls per request,
more than a trivial model's ``predict``.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from mlserve.core.stats import take_pending

__all__ = [
    "LATENCY_BUCKETS",
    "ModelRecorder",
    "OpCounts",
    "StreamCounts",
    "model_recorder",
    "recorders",
]

# Upper bounds (seconds) of the latency histogram's buckets; +Inf is implied.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_BUCKET_NS = tuple(round(bound * 1e9) for bound in LATENCY_BUCKETS)
FOLD_AT = 2 * 1024  # numbers pending (two per call) that fold them into the counters


class OpCounts:
    """The counts of one (model, version, operation)."""

    __slots__ = ("buckets", "created", "errors", "requests", "seconds")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.seconds = 0.0  # the latency histogram's sum (successful calls)
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket, the last is +Inf
        self.created = time.time()


class StreamCounts:
    """The streamed calls of one model version: chunks sent, time to the first chunk."""

    __slots__ = ("buckets", "chunks", "created", "first", "seconds")

    def __init__(self) -> None:
        self.chunks = 0
        self.first = 0  # streams that sent a first chunk
        self.seconds = 0.0  # the time-to-first-chunk histogram's sum
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.created = time.time()


class ModelRecorder:
    """Requests, errors, latency and load time of one model version."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self.ops: dict[str, OpCounts] = {}
        self.load_seconds: float | None = None  # None until loaded
        self.streams: StreamCounts | None = None  # None until a stream ends
        self._pending: list[str | int] = []  # (op, elapsed_ns) of each successful call, flat
        self._lock = threading.Lock()

    def _counts(self, op: str) -> OpCounts:
        counts = self.ops.get(op)
        if counts is None:
            with self._lock:
                counts = self.ops.setdefault(op, OpCounts())
        return counts

    def ok(self, op: str, elapsed_ns: int) -> None:
        """One successful ``op`` that took ``elapsed_ns``: appended (``list +=`` a tuple is
        one step under the GIL), counted when read."""
        pending = self._pending
        pending += (op, elapsed_ns)
        if len(pending) >= FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        """Take the pending calls into the counts: each operation's latencies sorted
        once, each bucket's share found by bisection (no Python step per call)."""
        pending = self._pending
        if not pending:
            return
        with self._lock:
            taken = take_pending(pending)
            if not taken:  # another reader took them first
                return
            ops, latencies = taken[0::2], taken[1::2]
            if ops.count(ops[0]) == len(ops):  # one operation (the usual): no grouping
                by_op = {ops[0]: latencies}
            else:
                by_op = {}
                for op, elapsed_ns in zip(ops, latencies, strict=True):
                    by_op.setdefault(op, []).append(elapsed_ns)
            for op, values in by_op.items():
                counts = self.ops.get(op) or self.ops.setdefault(op, OpCounts())
                values.sort()
                counts.requests += len(values)
                counts.seconds += sum(values) / 1e9
                below = 0
                for index, bound in enumerate(_BUCKET_NS):
                    upto = bisect_right(values, bound)  # calls of at most ``bound`` ns
                    counts.buckets[index] += upto - below
                    below = upto
                counts.buckets[-1] += len(values) - below

    def error(self, op: str) -> None:
        counts = self._counts(op)
        with self._lock:
            counts.requests += 1
            counts.errors += 1

    def streamed(self, first_chunk_ns: int | None, chunks: int) -> None:
        """A streamed call ended after ``chunks`` chunks, its first ``first_chunk_ns``
        after it began (None: none came): ``mlserve_model_stream_chunks_total`` and
        ``mlserve_model_stream_first_chunk_seconds``."""
        with self._lock:
            counts = self.streams
            if counts is None:
                counts = self.streams = StreamCounts()
            counts.chunks += chunks
            if first_chunk_ns is not None:
                counts.first += 1
                counts.seconds += first_chunk_ns / 1e9
                counts.buckets[bisect_left(_BUCKET_NS, first_chunk_ns)] += 1

    def stream_snapshot(self) -> tuple[int, int, float, list[int], float] | None:
        """``(chunks, first chunks, seconds, buckets, created)``; None before any stream."""
        with self._lock:
            c = self.streams
            return None if c is None else (c.chunks, c.first, c.seconds, list(c.buckets), c.created)

    def snapshot(self) -> list[tuple[str, int, int, float, list[int], float]]:
        """``(op, requests, errors, seconds, buckets, created)`` of each operation, consistent."""
        self._fold()
        with self._lock:
            return [
                (op, c.requests, c.errors, c.seconds, list(c.buckets), c.created)
                for op, c in self.ops.items()
            ]

    def loaded(self, seconds: float) -> None:
        """The version's ``load()`` took ``seconds`` (``mlserve_model_load_seconds``)."""
        self.load_seconds = seconds


_recorders: dict[tuple[str, str], ModelRecorder] = {}
_lock = threading.Lock()


def model_recorder(name: str, version: str) -> ModelRecorder:
    """The (cached) recorder of model ``name`` version ``version``."""
    recorder = _recorders.get((name, version))
    if recorder is None:
        with _lock:
            recorder = _recorders.setdefault((name, version), ModelRecorder(name, version))
    return recorder


def recorders() -> Iterator[ModelRecorder]:
    """Every model version's recorder, for the metrics' collector."""
    with _lock:
        found = list(_recorders.values())
    yield from found
