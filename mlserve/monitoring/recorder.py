"""The model layer's small door to the Prometheus metrics.

``V2ModelServer`` calls ``model_recorder(name, version).ok(op, seconds)`` on every
request. A call only adds to plain counters under one lock; the families
``mlserve_model_requests``, ``mlserve_model_errors`` and
``mlserve_model_latency_seconds`` are read from them when ``/metrics`` is scraped
(``mlserve.monitoring.metrics``). ``prometheus_client``'s own children took three
locks and a dozen calls per request, more than a trivial model's ``predict``.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Iterator

__all__ = ["LATENCY_BUCKETS", "ModelRecorder", "OpCounts", "model_recorder", "recorders"]

# Upper bounds (seconds) of the latency histogram's buckets; +Inf is implied.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class OpCounts:
    """The counts of one (model, version, operation)."""

    __slots__ = ("buckets", "created", "errors", "requests", "seconds")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.seconds = 0.0  # the latency histogram's sum (successful calls)
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket, the last is +Inf
        self.created = time.time()


class ModelRecorder:
    """Requests, errors, latency and load time of one model version."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self.ops: dict[str, OpCounts] = {}
        self._lock = threading.Lock()

    def _counts(self, op: str) -> OpCounts:
        counts = self.ops.get(op)
        if counts is None:
            with self._lock:
                counts = self.ops.setdefault(op, OpCounts())
        return counts

    def ok(self, op: str, seconds: float) -> None:
        counts = self.ops.get(op) or self._counts(op)
        bucket = bisect_left(LATENCY_BUCKETS, seconds)  # the first bound >= seconds
        with self._lock:
            counts.requests += 1
            counts.seconds += seconds
            counts.buckets[bucket] += 1

    def error(self, op: str) -> None:
        counts = self._counts(op)
        with self._lock:
            counts.requests += 1
            counts.errors += 1

    def snapshot(self) -> list[tuple[str, int, int, float, list[int], float]]:
        """``(op, requests, errors, seconds, buckets, created)`` of each operation, consistent."""
        with self._lock:
            return [
                (op, c.requests, c.errors, c.seconds, list(c.buckets), c.created)
                for op, c in self.ops.items()
            ]

    def loaded(self, seconds: float) -> None:
        from mlserve.monitoring import metrics

        metrics.MODEL_LOAD_SECONDS.labels(self.name, self.version).set(seconds)


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
