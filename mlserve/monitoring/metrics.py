"""Prometheus metrics of S14, in mlserve's own registry (served at ``/metrics``).

Models count their calls in :mod:`mlserve.monitoring.recorder` (plain counters,
one lock per call); ``ModelCalls`` turns them into the three per-model families
when the registry is collected.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from mlserve.monitoring.recorder import LATENCY_BUCKETS, recorders

__all__ = [
    "BATCH_SIZE",
    "MODEL_LOAD_SECONDS",
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
        return list(self._families([]))

    def collect(self) -> Iterator[Metric]:
        rows = [(r.name, r.version, snap) for r in recorders() for snap in r.snapshot()]
        return self._families(rows)

    @staticmethod
    def _families(
        rows: list[tuple[str, str, tuple[str, int, int, float, list[int], float]]],
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
        yield from (requests, errors, latency)


REGISTRY.register(ModelCalls())

MODEL_LOAD_SECONDS = Gauge(
    "mlserve_model_load_seconds",
    "How long the model's load() took.",
    ("model", "version"),
    registry=REGISTRY,
)
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
