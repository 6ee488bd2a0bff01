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
from mlserve.graph.rollout import decision_counts
from mlserve.graph.shadow import ShadowCounts, shadow_counts
from mlserve.monitoring.responses import GrpcKey, HttpKey, grpc_totals, http_totals

__all__ = [
    "BATCH_SIZE",
    "FaceResponses",
    "ModelCalls",
    "QUEUE_DEPTH",
    "REGISTRY",
    "RolloutDecisions",
    "STREAM_DROPPED",
    "STREAM_FAILED",
    "STREAM_SENT",
    "ShadowCalls",
    "WORKER_RESTARTS",
]

REGISTRY = CollectorRegistry(auto_describe=True)

_MODEL = ("model", "version", "operation")


class ModelCalls(Collector):
    """``mlserve_model_requests``, ``mlserve_model_errors`` (counters) and
    ``mlserve_model_latency_seconds`` (a histogram of successful calls), labelled
    by model, version and operation, read from the models' recorders."""

    def describe(self) -> list[Metric]:
        return [*self._families([], []), *_stream_families([])]

    def collect(self) -> Iterator[Metric]:
        found = list(recorders())
        rows = [(r.name, r.version, snap) for r in found for snap in r.snapshot()]
        loads = [(r.name, r.version, r.load_seconds) for r in found if r.load_seconds is not None]
        yield from self._families(rows, loads)
        streams = [(r.name, r.version, r.stream_snapshot()) for r in found]
        yield from _stream_families([(n, v, s) for n, v, s in streams if s is not None])

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


def _stream_families(
    rows: list[tuple[str, str, tuple[int, int, float, list[int], float]]],
) -> Iterator[Metric]:
    """``mlserve_model_stream_chunks_total`` and ``mlserve_model_stream_first_chunk_seconds``
    of the models that streamed (docs/monitoring.md#prometheus-metrics)."""
    labels = ("model", "version")
    chunks = CounterMetricFamily(
        "mlserve_model_stream_chunks", "Chunks the model's streamed answers sent.", labels=labels
    )
    first = HistogramMetricFamily(
        "mlserve_model_stream_first_chunk_seconds",
        "Time from a streamed call's start to its first chunk.",
        labels=labels,
    )
    bounds = [floatToGoString(b) for b in LATENCY_BUCKETS] + ["+Inf"]
    for name, version, (sent, _, seconds, buckets, created) in rows:
        chunks.add_metric((name, version), sent, created=created)
        cumulative, total = [], 0
        for bound, n in zip(bounds, buckets, strict=True):
            total += n
            cumulative.append((bound, total))
        first.add_metric((name, version), cumulative, seconds)
    yield from (chunks, first)


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


class ShadowCalls(Collector):
    """``mlserve_shadow_agreement`` (each shadow's answers that agree with, or differ
    from, the primary's, or failed) and ``mlserve_shadow_dropped`` (copies a busy shadow
    dropped), read from the shadows' counts (docs/graphs.md#shadow-routes)."""

    def describe(self) -> list[Metric]:
        return list(self._families({}))

    def collect(self) -> Iterator[Metric]:
        yield from self._families(shadow_counts())

    @staticmethod
    def _families(counts: dict[str, ShadowCounts]) -> Iterator[Metric]:
        agreement = CounterMetricFamily(
            "mlserve_shadow_agreement",
            "Shadow answers compared with the primary's, by result.",
            labels=("shadow", "result"),
        )
        dropped = CounterMetricFamily(
            "mlserve_shadow_dropped",
            "Request copies a shadow dropped: its queue was full.",
            labels=("shadow",),
        )
        for shadow, count in sorted(counts.items()):
            for result in ("agree", "disagree", "error"):
                agreement.add_metric((shadow, result), getattr(count, result))
            dropped.add_metric((shadow,), count.dropped)
        yield from (agreement, dropped)


REGISTRY.register(ShadowCalls())


class RolloutDecisions(Collector):
    """``mlserve_rollout_decisions``: each canary's automatic rollbacks and promotions
    (docs/graphs.md#rolling-back-or-promoting-a-canary)."""

    def describe(self) -> list[Metric]:
        return [self._family({})]

    def collect(self) -> Iterator[Metric]:
        yield self._family(decision_counts())

    @staticmethod
    def _family(counts: dict[tuple[str, str, str], int]) -> Metric:
        family = CounterMetricFamily(
            "mlserve_rollout_decisions",
            "A canary's rollout decisions, by model, variant and decision.",
            labels=("model", "variant", "decision"),
        )
        for labels, count in sorted(counts.items()):
            family.add_metric(labels, count)
        return family


REGISTRY.register(RolloutDecisions())
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
