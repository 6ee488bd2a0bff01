"""``DriftGauges``: the monitor's results as Prometheus families
(docs/monitoring.md#drift-metrics).

Gauges hold each endpoint's last window; counters count the records the monitor read
and the monitoring applications that failed. They live on the registry the caller
gives: a registry of its own in ``mlserve monitor`` (``--metrics-port``). A serving
process (``serve --monitor``, whose monitor runs in a process of its own) shows the
same gauges on its ``/metrics`` through ``StoreDriftCollector``, which reads them from
the endpoint records when scraped.

A value the window could not give (no calls, a feature without data) is NaN, and an
infinite divergence is ``+Inf``: Prometheus parses both, and a query skips NaN.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.registry import Collector

from mlserve.monitoring.alerts import DRIFT_LEVELS
from mlserve.monitoring.endpoints import ModelEndpoint

__all__ = ["DRIFT_METRICS", "DriftGauges", "RECORD_RESULTS", "StoreDriftCollector"]

DRIFT_METRICS = ("tvd", "hellinger", "kld")
"""Per-feature measures, labelled ``metric``; their means and ``general_drift`` are
labelled ``feature=""``, ``metric`` the record's key (``tvd_mean``, ...)."""
SUMMARY_METRICS = ("tvd_mean", "hellinger_mean", "kld_mean", "general_drift")
RECORD_RESULTS = ("counted", "malformed", "late", "skipped")
_ENDPOINT = ("endpoint_id", "model")
_LATENCY = (("0.5", "latency_p50_us"), ("0.99", "latency_p99_us"), ("mean", "latency_mean_us"))


def _value(raw: Any) -> float:
    """A measure as a gauge's value: NaN when missing or not a number."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return math.nan
    return float(raw)


class DriftGauges:
    """The drift and window families of the monitor, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.drift = Gauge(
            "mlserve_model_drift",
            "Drift of the last window's inputs from the reference, per feature and measure.",
            ("endpoint_id", "model", "metric", "feature"),
            registry=registry,
        )
        self.status = Gauge(
            "mlserve_model_drift_status",
            "Drift status of the last window: 0 none, 1 possible, 2 detected, -1 unknown.",
            _ENDPOINT,
            registry=registry,
        )
        self.requests = Gauge(
            "mlserve_monitor_window_requests",
            "Calls in the endpoint's last monitored window.",
            _ENDPOINT,
            registry=registry,
        )
        self.errors = Gauge(
            "mlserve_monitor_window_errors",
            "Failed calls in the endpoint's last monitored window.",
            _ENDPOINT,
            registry=registry,
        )
        self.latency = Gauge(
            "mlserve_monitor_window_latency_seconds",
            "Latency of the last window's calls: median, 99th percentile and mean.",
            (*_ENDPOINT, "quantile"),
            registry=registry,
        )
        self.rate = Gauge(
            "mlserve_monitor_window_predictions_per_second",
            "Calls per second over the endpoint's last monitored window.",
            _ENDPOINT,
            registry=registry,
        )
        self.records = Counter(
            "mlserve_monitor_records",
            "Model-log records the monitor read: counted in a window, malformed, late "
            "(their window was closed), or skipped (not a model call).",
            ("result",),
            registry=registry,
        )
        self.application_errors = Counter(
            "mlserve_monitor_application_errors",
            "Monitoring applications that raised on a window.",
            ("application",),
            registry=registry,
        )
        for result in RECORD_RESULTS:  # each series exists from the start, at 0
            self.records.labels(result)
        self._features: dict[str, set[tuple[str, str, str, str]]] = {}  # drift series by uid
        self._lock = threading.Lock()

    def update(
        self, endpoint: ModelEndpoint, measures: dict[str, Any], status: str, window: dict[str, Any]
    ) -> None:
        """Set the endpoint's families to a window's results: its ``drift_measures``
        (per feature ``{tvd, hellinger, kld}`` and the means), drift ``status`` and
        ``window`` (as ``EndpointStatus.window``). Drift series of features the window
        no longer has are removed."""
        uid, model = endpoint.metadata.uid, endpoint.spec.model
        series: dict[tuple[str, str, str, str], float] = {}
        for feature, values in measures.items():
            if isinstance(values, dict):
                for metric in DRIFT_METRICS:
                    series[(uid, model, metric, feature)] = _value(values.get(metric))
        for metric in SUMMARY_METRICS:
            if metric in measures:
                series[(uid, model, metric, "")] = _value(measures[metric])
        with self._lock:
            for gone in self._features.get(uid, set()) - series.keys():
                self.drift.remove(*gone)
            self._features[uid] = set(series)
        for labels, value in series.items():
            self.drift.labels(*labels).set(value)
        self.status.labels(uid, model).set(DRIFT_LEVELS.get(status, -1) if status else -1)
        self.requests.labels(uid, model).set(_value(window.get("requests")))
        self.errors.labels(uid, model).set(_value(window.get("errors")))
        for quantile, key in _LATENCY:
            self.latency.labels(uid, model, quantile).set(_value(window.get(key)) / 1e6)
        self.rate.labels(uid, model).set(_value(window.get("predictions_per_second")))

    def count_records(self, result: str, count: int = 1) -> None:
        """Add ``count`` records of the monitor's stream to ``result`` (``RECORD_RESULTS``)."""
        if result not in RECORD_RESULTS:
            raise ValueError(f"unknown record result {result!r} (one of {RECORD_RESULTS})")
        self.records.labels(result).inc(count)

    def count_application_error(self, application: str) -> None:
        """One more window on which ``application`` raised."""
        self.application_errors.labels(application).inc()


class StoreDriftCollector(Collector):
    """The drift and window gauges of every monitored endpoint in the store at
    ``store_url``, read when ``/metrics`` is scraped (a few rows; never on a request's
    path): the serving process's view of a monitor that runs elsewhere."""

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self._store: Any = None

    def collect(self) -> Any:
        from mlserve.monitoring.stores import open_store

        if self._store is None:
            self._store = open_store(self.store_url)
        registry = CollectorRegistry()
        gauges = DriftGauges(registry)
        try:
            endpoints = self._store.list()
        except Exception:  # a store that is down: no gauges this scrape
            return
        for endpoint in endpoints:
            status = endpoint.status
            if status.window:
                gauges.update(endpoint, status.drift_measures, status.drift_status, status.window)
        for family in registry.collect():
            if family.name.startswith(("mlserve_model_drift", "mlserve_monitor_window")):
                yield family
