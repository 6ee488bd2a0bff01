"""Prometheus metrics in mlserve's own registry, served at ``/metrics``
(docs/monitoring.md#prometheus-metrics).

Models count their calls in :mod:`mlserve.core.recorder` (plain counters,
one lock per call); ``ModelCalls`` turns them into the per-model families (calls, errors,
latency, load time)
when the registry is collected. The faces count their answers in
:mod:`mlserve.monitoring.responses`, which ``FaceResponses`` reads. prometheus_client's
standard collectors add ``process_*`` (this process: one worker of ``--workers N``) and
``python_*``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from mlserve.core.recorder import LATENCY_BUCKETS, recorders
from mlserve.monitoring.responses import GrpcKey, HttpKey, grpc_totals, http_totals

__all__ = [
    "BATCH_SIZE",
    "FaceResponses",
    "ModelCalls",
    "QUEUE_DEPTH",
    "REGISTRY",
    "STREAM_DROPPED",
    "STREAM_FAILED",
    "STREAM_SENT",
    "WORKER_RESTARTS",
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


class FaceResponses(Collector):
    """``mlserve_http_responses_total{method,code}`` and
    ``mlserve_grpc_responses_total{service,method,code}``: every answer of the network
    faces, their own refusals included, read from the faces' counts."""

    def describe(self) -> list[Metric]:
        return list(self._families({}, {}))

    def collect(self) -> Iterator[Metric]:
        return self._families(http_totals(), grpc_totals())

    @staticmethod
    def _families(http: dict[HttpKey, int], grpc: dict[GrpcKey, int]) -> Iterator[Metric]:
        http_family = CounterMetricFamily(
            "mlserve_http_responses",
            "HTTP responses by request method and status code.",
            labels=("method", "code"),
        )
        for (status, method), count in sorted(http.items()):
            http_family.add_metric((method, str(status)), count)
        grpc_family = CounterMetricFamily(
            "mlserve_grpc_responses",
            "gRPC calls by service, method and final status code.",
            labels=("service", "method", "code"),
        )
        for labels, count in sorted(grpc.items()):
            grpc_family.add_metric(labels, count)
        yield from (http_family, grpc_family)


REGISTRY.register(FaceResponses())
# The standard families prometheus_client's default registry has: process_* (this
# process's CPU, memory, descriptors, start time; Linux), python_info, python_gc_*.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

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
# With --workers N: the supervisor's count, which it tells every worker, so a scrape
# that reaches any worker reads the same (docs/deployment.md#when-a-worker-dies).
WORKER_RESTARTS = Counter(
    "mlserve_worker_restarts",
    "Workers of --workers N the supervisor restarted after they died.",
    registry=REGISTRY,
)
