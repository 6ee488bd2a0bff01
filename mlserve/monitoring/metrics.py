"""Prometheus metrics in mlserve's own registry, served at ``/metrics``
(docs/monitoring.md#prometheus-metrics).

Models count their calls in :mod:`mlserve.core.recorder` (plain counters,
one lock per call); ``ModelCalls`` turns them into the per-model families (calls, errors,
latency, load time)
when the registry is collected.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from mlserve.core.recorder import LATENCY_BUCKETS, recorders

__all__ = [
    "BATCH_SIZE",
    "ModelCalls",
    "QUEUE_DEPTH",
    "REGISTRY",
    "STREAM_DROPPED",
    "STREAM_FAILED",
    "STREAM_SENT",
]

REGISTRY = CollectorRegistry(auto_describe=True)

_MODEL = ("model", "version", "operation")


class ModelCalls(Collector):
    """``mlserve_model_requests``, ``mlserve_model_errors`` (counters) and
    ``mlserve_model_latency_seconds`` (a histogram of successful calls), labelled
    by model, version and operation, read from the models' recorders."""

    def describe(self) -> list[Metric]:
        return list(self._families([], []))

    def collect(self) -> Iterator[Metric]:
        found = list(recorders())
        rows = [(r.name, r.version, snap) for r in found for snap in r.snapshot()]
        loads = [(r.name, r.version, r.load_seconds) for r in found if r.load_seconds is not None]
        return self._families(rows, loads)

    @staticmethod
    def _families(
        rows: list[tuple[str, str, tuple[str, int, int, float, list[int], float]]],
        loads: list[tuple[str, str, float]],
    ) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "mlserve_model_requests", "Model calls (successful or not).", labels=_MODEL
        )
        errors = CounterMetricFamily(
            "mlserve_model_errors", "Model calls that failed.", labels=_MODEL
        )
        latency = HistogramMetricFamily(
            "mlserve_model_latency_seconds",
            "Latency of successful model calls, preprocess to postprocess.",
            labels=_MODEL,
        )
        bounds = [floatToGoString(b) for b in LATENCY_BUCKETS] + ["+Inf"]
        for name, version, (op, count, failed, seconds, buckets, created) in rows:
            labels = (name, version, op)
            requests.add_metric(labels, count, created=created)
            errors.add_metric(labels, failed, created=created)
            cumulative, total = [], 0
            for bound, n in zip(bounds, buckets, strict=True):
                total += n
                cumulative.append((bound, total))
            latency.add_metric(labels, cumulative, seconds)
            latency.add_sample(
                "mlserve_model_latency_seconds_created",
                dict(zip(_MODEL, labels, strict=True)),
                created,
            )
        load = GaugeMetricFamily(
            "mlserve_model_load_seconds",
            "How long the model's load() took.",
            labels=("model", "version"),
        )
        for name, version, seconds in loads:
            load.add_metric((name, version), seconds)
        yield from (requests, errors, latency, load)


REGISTRY.register(ModelCalls())

BATCH_SIZE = Histogram(
    "mlserve_batch_size",
    "Requests per adaptive batch.",
    ("model",),
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "mlserve_queue_depth",
    "Requests waiting for a batch or a worker.",
    ("model",),
    registry=REGISTRY,
)
STREAM_SENT = Counter(
    "mlserve_stream_sent",
    "Logged calls delivered to the model-log stream (a batched record counts its rows).",
    ("stream",),
    registry=REGISTRY,
)
STREAM_FAILED = Counter(
    "mlserve_stream_failed",
    "Logged calls in failed sends to the model-log stream (retried).",
    ("stream",),
    registry=REGISTRY,
)
STREAM_DROPPED = Counter(
    "mlserve_stream_dropped",
    "Logged calls dropped: past the buffer bound, or not delivered at shutdown.",
    ("stream",),
    registry=REGISTRY,
)
