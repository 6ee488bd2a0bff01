"""The monitor: the model-log stream in, each endpoint's windows, drift and
applications out to its record (docs/monitoring.md#drift).

As mlrun's stream processing is itself a serving graph, the monitor is an mlserve
flow on the storey engine, with three steps:

    count    (CountRecords)    a batch of stream records -> the windows it closed
    analyze  (AnalyzeWindows)  each closed window -> metrics, drift, applications
    publish  (PublishWindows)  -> endpoint records and partition state (one
                                  transaction), gauges, results stream, alerts;
                                  answers the stream positions to commit

``Monitor.step`` polls the source, sends the batch through the flow and commits
what the flow answered. One event carries a whole batch (thousands of records): the
flow's cost per event is paid per batch, and the records are counted in a tight
loop (``PartitionWindows.add``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any, Protocol

from mlserve.core.aio import run_in_threadpool
from mlserve.core.context import GraphContext
from mlserve.core.events import Event
from mlserve.monitoring.endpoints import ModelEndpoint, endpoint_uid
from mlserve.monitoring.windows import ClosedWindow, PartitionWindows

__all__ = [
    "AlertsOutput",
    "AnalyzeWindows",
    "CountRecords",
    "Monitor",
    "MonitorOutput",
    "MonitorSettings",
    "MonitorThread",
    "PublishWindows",
    "ResultsOutput",
    "WindowReport",
    "open_monitor",
    "uid_of_record",
]

logger = logging.getLogger("mlserve.monitoring")

DEFAULT_WINDOW_SECONDS = 600.0


@dataclass(frozen=True)
class MonitorSettings:
    """How the monitor windows and reads (``mlserve monitor --help``)."""

    window: float = DEFAULT_WINDOW_SECONDS
    grace: float | None = None
    """How late a record may come and still join its window; default: a tenth of the
    window, at most 10 s (a window is written ``grace`` after its end)."""
    max_records: int = 20_000
    """Records read per batch (one flow event)."""
    poll_seconds: float = 0.5

    @property
    def grace_seconds(self) -> float:
        if self.grace is not None:
            return float(self.grace)
        return min(10.0, self.window / 10)


@dataclass(slots=True)
class WindowReport:
    """One endpoint's window, analysed: what is written to its record."""

    endpoint: ModelEndpoint
    closed: ClosedWindow
    fields: dict[str, Any]
    """The record's monitor fields (``stores.MONITOR_FIELDS``)."""
    failed_applications: list[str] = field(default_factory=list)

    def written(self) -> ModelEndpoint:
        """The endpoint record as the window left it."""
        status = self.endpoint.status.model_copy(update=self.fields)
        return self.endpoint.model_copy(update={"status": status})


class MonitorOutput(Protocol):
    """Where a window's report goes besides the record: the results stream
    (``ResultsStream``), the webhook (``AlertsOutput``)."""

    def publish(self, report: WindowReport) -> None: ...

    def close(self) -> None: ...


class ResultsOutput:
    """One record per endpoint and window to a results stream."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def publish(self, report: WindowReport) -> None:
        self.stream.write(report.written())

    def close(self) -> None:
        self.stream.close()


class AlertsOutput:
    """The webhook, told each window's drift status (it POSTs when the status rises)."""

    def __init__(self, alerts: Any) -> None:
        self.alerts = alerts

    def publish(self, report: WindowReport) -> None:
        fields = report.fields  # observe() compares with the record before this window
        summary = {
            "general_drift": fields["drift_measures"].get("general_drift"),
            "drift_measures": fields["drift_measures"],
            "window": fields["window"],
        }
        self.alerts.observe(report.endpoint, fields["drift_status"], summary)

    def close(self) -> None:
        self.alerts.close()


_URI_CACHE: dict[tuple[str, str, str], str] = {}


def uid_of_record(record: dict[str, Any]) -> str:
    """The endpoint of a record: its ``endpoint_id``, else the uid its function and
    model give (``endpoint_uid``), as the server registered it."""
    uid = record.get("endpoint_id")
    if uid:
        return str(uid)
    key = (
        str(record.get("function_uri", "")),
        str(record.get("model", "")),
        str(record.get("version") or ""),
    )
    uid = _URI_CACHE.get(key)
    if uid is None:
        project, function, tag = _function_parts(key[0])
        uid = _URI_CACHE[key] = endpoint_uid(project, function, tag, key[1], key[2])
    return uid


def _function_parts(function_uri: str) -> tuple[str, str, str]:
    """``project/function:tag`` -> (project, function, tag)."""
    project, _, rest = function_uri.rpartition("/")
    function, _, tag = rest.partition(":")
    return project or "default", function, tag


class CountRecords:
    """Flow step: a batch ``{"messages", "now"}`` -> ``[(partition, [ClosedWindow])]``."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def do(self, batch: dict[str, Any]) -> list[tuple[int, list[ClosedWindow]]]:
        return self.monitor.count(batch["messages"], batch["now"])


class AnalyzeWindows:
    """Flow step: closed windows -> ``[(partition, [WindowReport])]``."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def do(
        self, closes: list[tuple[int, list[ClosedWindow]]]
    ) -> list[tuple[int, list[WindowReport]]]:
        return [(p, [self.monitor.analyze(c) for c in closed]) for p, closed in closes]


class PublishWindows:
    """Flow step (the responder): reports written -> ``{partition: position to commit}``."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor

    def do(self, reports: list[tuple[int, list[WindowReport]]]) -> dict[int, Any]:
        return self.monitor.publish(reports)


class Monitor:
    """Reads ``source`` (``mlserve.monitoring.sources``), writes ``store``
    (``mlserve.monitoring.stores``); ``applications`` run on every window after the
    built-in histogram data-drift application."""

    def __init__(
        self,
        source: Any,
        store: Any,
        settings: MonitorSettings | None = None,
        applications: Sequence[Any] = (),
        outputs: Sequence[MonitorOutput] = (),
        thresholds: Any = None,
        gauges: Any = None,
        reopen: Callable[[], Any] | None = None,
    ) -> None:
        from mlserve.monitoring.applications import HistogramDataDriftApplication

        self.source = source
        self.store = store
        self.settings = settings or MonitorSettings()
        self.applications = [HistogramDataDriftApplication(thresholds), *applications]
        self.outputs = list(outputs)
        self.gauges = gauges
        """``DriftGauges``: each window's drift and metrics, the records counted."""
        self.partitions: dict[int, PartitionWindows] = {}
        self.counts: dict[str, int] = {"counted": 0, "malformed": 0, "late": 0, "skipped": 0}
        """Records read, in all: counted in a window, malformed, late, skipped (read again)."""
        self._retired = dict(self.counts)  # the counts of partitions given up
        self.windows_written = 0
        self.application_errors: dict[str, int] = {}
        self.store_url = ""
        self._unmatched: set[str] = set()  # endpoints told their inputs match no feature
        self._unreferenced: set[str] = set()  # endpoints told they have no reference
        self._flow: Any = None
        self._reopen = reopen
        """Opens the source again (at its committed positions) after a failed step."""
        self._broken = False
        source.on_revoke = self.revoke

    # ---- the flow ---------------------------------------------------------------------

    def _build_flow(self) -> Any:
        from mlserve.graph.flow import RootFlowStep

        flow = RootFlowStep(engine="async")
        flow.to(CountRecords(self), name="count").to(AnalyzeWindows(self), name="analyze").to(
            PublishWindows(self), name="publish"
        ).respond()
        flow.init_object(GraphContext(), {})
        return flow

    async def step(self, timeout: float | None = None) -> int:
        """Poll once, run the batch through the flow, commit; the records read."""
        if self._flow is None:
            self._flow = self._build_flow()
        wait = self.settings.poll_seconds if timeout is None else timeout
        messages = await run_in_threadpool(self.source.poll, self.settings.max_records, wait)
        event = await self._flow.run_async(Event({"messages": messages, "now": None}))
        positions = event.body
        if positions:
            await run_in_threadpool(self.source.commit, positions)
        return len(messages)

    async def run(self, stop: asyncio.Event) -> None:
        """Step until ``stop`` is set; open windows stay open (a restart reads them again)."""
        try:
            while not stop.is_set():
                try:
                    if self._broken:
                        await run_in_threadpool(self.restart)
                    await self.step()
                except Exception:  # a store or stream that is down: try again shortly
                    logger.exception(
                        "monitor: a step failed; reading again from the committed positions"
                    )
                    self._broken = True
                    await asyncio.sleep(1.0)
        finally:
            self.close()

    def restart(self) -> None:
        """After a failed step (its windows may be half written): forget the open windows
        and read again from the committed positions, as a restarted monitor does
        (docs/monitoring.md#nothing-lost-nothing-counted-twice)."""
        for partition in list(self.partitions):
            self._retire(partition)
        if self._reopen is not None:
            try:
                self.source.close()
            except Exception:
                logger.debug("monitor: closing the failed source", exc_info=True)
            self.source = self._reopen()
            self.source.on_revoke = self.revoke
        self._broken = False

    def close(self) -> None:
        if self._flow is not None:
            self._flow.wait_for_completion()
            self._flow = None
        for output in self.outputs:
            try:
                output.close()
            except Exception:
                logger.exception("monitor: closing an output failed")
        self.source.close()

    # ---- count ------------------------------------------------------------------------

    def count(self, messages: list[Any], now: float | None) -> list[tuple[int, list[ClosedWindow]]]:
        """Add the records to their partitions' windows; close what is due."""
        for message in messages:
            part = self.partitions.get(message.partition)
            if part is None:
                part = self._partition(message.partition)
            part.add(message.value, message.position)
        closes = []
        for partition, part in self.partitions.items():
            boundary = part.due(now)
            if boundary > part.boundary:
                closes.append((partition, part.close(boundary)))
        for key, before in self.counts.items():
            now_counted = self._retired[key] + sum(p.counts[key] for p in self.partitions.values())
            if self.gauges is not None and now_counted > before:
                self.gauges.count_records(key, now_counted - before)
            self.counts[key] = now_counted
        return closes

    def _partition(self, partition: int) -> PartitionWindows:
        state = self.store.partition_state(self.source.name, partition)
        part = self.partitions[partition] = PartitionWindows(
            partition,
            self.settings.window,
            self.settings.grace_seconds,
            uid_of_record,
            self.source.resume_at,
            state,
        )
        return part

    def revoke(self, partitions: list[int]) -> None:
        """A rebalance takes ``partitions`` away: their open windows are dropped (the
        new owner reads them again from the committed position)."""
        for partition in partitions:
            part = self._retire(partition)
            if part is not None and part.open:
                logger.info(
                    "monitor: partition %s moved to another monitor with %d open windows",
                    partition,
                    len(part.open),
                )

    def _retire(self, partition: int) -> PartitionWindows | None:
        """Stop keeping ``partition``'s windows (its counts stay in ``counts``)."""
        part = self.partitions.pop(partition, None)
        if part is not None:
            for key, value in part.counts.items():
                self._retired[key] += value
        return part

    # ---- analyze ----------------------------------------------------------------------

    def analyze(self, closed: ClosedWindow) -> WindowReport:
        """The window's metrics, its drift and the applications' results."""
        from mlserve.monitoring.applications import MonitoringApplicationContext, run_applications

        window = closed.window
        endpoint = self._endpoint(window.uid, window.head)
        previous = endpoint.status
        fields: dict[str, Any] = {
            "window": closed.summary(),
            "current_stats": previous.current_stats,
            "drift_measures": previous.drift_measures,
            "drift_status": previous.drift_status,
            "results": {},
        }
        report = WindowReport(endpoint, closed, fields)
        uid = window.uid
        if not window.rows and not endpoint.spec.feature_stats:
            return report
        sample = _frame(window.rows, _feature_names(endpoint))
        start = datetime.fromtimestamp(window.start, UTC)
        end = datetime.fromtimestamp(closed.end, UTC)

        def context(application: Any) -> Any:
            return MonitoringApplicationContext(application.NAME, endpoint, sample, start, end)

        applications = self.applications
        if not endpoint.spec.feature_stats:  # no reference: no drift (said once)
            applications = applications[1:]
            if uid not in self._unreferenced:
                self._unreferenced.add(uid)
                logger.info(
                    "monitor: endpoint %s (%s) has no reference statistics: its windows have "
                    "metrics, no drift (docs/monitoring.md#reference-statistics)",
                    uid,
                    endpoint.spec.model,
                )
        results, failed = run_applications(applications, context)
        report.failed_applications = failed
        for name in failed:
            self.application_errors[name] = self.application_errors.get(name, 0) + 1
            if self.gauges is not None:
                self.gauges.count_application_error(name)
        for app_name, app_results in results.items():
            fields["results"][app_name] = {
                r.name: _result_fields(r) for r in app_results if hasattr(r, "name")
            }
            for result in app_results:
                extra = getattr(result, "extra_data", None) or {}
                if "drift_status" in extra and window.rows:
                    self._drift(report, extra)
        return report

    def _drift(self, report: WindowReport, extra: dict[str, Any]) -> None:
        """The drift application's findings, on the record: unless no feature of the
        window is one of the reference's (then nothing was measured: said once)."""
        general = extra["drift_measures"].get("general_drift")
        uid = report.endpoint.metadata.uid
        if general is None or math.isnan(general):
            if uid not in self._unmatched:
                self._unmatched.add(uid)
                logger.warning(
                    "monitor: endpoint %s (%s): no input column is a feature of its reference "
                    "%s; drift is not measured",
                    uid,
                    report.endpoint.spec.model,
                    list(report.endpoint.spec.feature_stats),
                )
            return
        report.fields["current_stats"] = extra["current_stats"]
        report.fields["drift_measures"] = extra["drift_measures"]
        report.fields["drift_status"] = extra["drift_status"]

    def _endpoint(self, uid: str, head: dict[str, Any]) -> ModelEndpoint:
        """The endpoint's record (created from the record's fields when the server
        registered none: a stream from a function without endpoint records)."""
        endpoint = self.store.get(uid)
        if endpoint is None:
            project, function, _ = _function_parts(str(head.get("function_uri", "")))
            model, version = str(head.get("model", "")), str(head.get("version") or "")
            endpoint = ModelEndpoint.model_validate(
                {
                    "metadata": {"project": project, "uid": uid},
                    "spec": {
                        "function_uri": str(head.get("function_uri", "")),
                        "model": f"{model}:{version or 'latest'}",
                        "model_class": str(head.get("class", "")),
                        "stream_path": self.source.name,
                    },
                }
            )
            self.store.upsert(endpoint)
        return endpoint

    # ---- publish ----------------------------------------------------------------------

    def publish(self, reports: list[tuple[int, list[WindowReport]]]) -> dict[int, Any]:
        """Write each partition's reports and state together; then the outputs."""
        positions: dict[int, Any] = {}
        for partition, partition_reports in reports:
            part = self.partitions.get(partition)
            if part is None:  # revoked while the batch ran: the new owner counts it
                continue
            self.store.write_windows(
                {r.endpoint.metadata.uid: r.fields for r in partition_reports},
                self.source.name,
                partition,
                part.state(),
            )
            self.windows_written += len(partition_reports)
            for report in partition_reports:
                self._counts_to_store(report)
                if self.gauges is not None:
                    fields = report.fields
                    self.gauges.update(
                        report.endpoint,
                        fields["drift_measures"],
                        fields["drift_status"],
                        fields["window"],
                    )
                for output in self.outputs:
                    try:
                        output.publish(report)
                    except Exception:  # an output never stops the monitor
                        logger.exception("monitor: an output failed for one window")
        for partition, part in self.partitions.items():
            position = part.commit_position()
            if position is not None:
                positions[partition] = position
        return positions

    def _counts_to_store(self, report: WindowReport) -> None:
        """An endpoint the monitor created (no server counts it) gets its calls counted."""
        if report.endpoint.spec.stream_path != self.source.name:
            return
        from mlserve.monitoring.endpoints import RequestCounts

        window = report.closed.window
        at = datetime.fromtimestamp(window.start, UTC)
        last = datetime.fromisoformat(window.last_when) if window.last_when else at
        self.store.add_counts(
            report.endpoint.metadata.uid,
            RequestCounts(at, last, window.requests, window.errors),
        )


def _feature_names(endpoint: ModelEndpoint) -> list[str]:
    """Column *i* of the inputs is feature *i*: the endpoint's feature names when there is
    one per feature of the reference, else the reference's own."""
    names, reference = list(endpoint.spec.feature_names), endpoint.spec.feature_stats
    if reference and len(names) != len(reference):
        return list(reference)
    return names


def _frame(rows: list[list[Any]], names: list[str]) -> Any:
    """The window's inputs as a DataFrame named by ``names`` (extra columns by index)."""
    import pandas as pd

    try:
        data: Any = _floats(rows)
        if data.ndim != 2:
            raise ValueError("ragged")
    except (ValueError, TypeError):  # ragged rows or text: pandas sorts it out
        data = pd.DataFrame(rows)
    frame = pd.DataFrame(data)
    frame.columns = [names[i] if i < len(names) else str(i) for i in range(frame.shape[1])]
    return frame


def _floats(rows: list[list[Any]]) -> Any:
    """``np.asarray(rows, dtype=np.float64)``, four times faster for lists of one length
    (a window's rows: thousands of short lists), and a slice at a time: in ``serve
    --monitor`` the server's event loop waits for the GIL while one call holds it, and
    a model call that waits too long is sent to threads (docs/serving.md#sync-and-async-models)."""
    import numpy as np

    try:
        if set(map(type, rows)) == {list}:
            (width,) = set(map(len, rows))
            data = np.empty((len(rows), width))
            for at in range(0, len(rows), _SLICE_ROWS):
                part = rows[at : at + _SLICE_ROWS]
                flat = np.fromiter(chain.from_iterable(part), np.float64, len(part) * width)
                data[at : at + len(part)] = flat.reshape(len(part), width)
                time.sleep(0)  # the GIL to whoever waits for it
            return data
    except (ValueError, TypeError):  # mixed lengths, items that are no numbers
        pass
    return np.asarray(rows, dtype=np.float64)


_SLICE_ROWS = 2048  # ~0.7 ms of the GIL a slice


def _result_fields(result: Any) -> dict[str, Any]:
    """An application's result or metric as stored under ``status.results``."""
    fields: dict[str, Any] = {"value": _number(result.value)}
    kind = getattr(result, "kind", None)
    if kind is not None:
        fields["kind"] = getattr(kind, "name", str(kind))
        status = result.status
        fields["status"] = int(getattr(status, "value", status))
        extra = {k: v for k, v in (result.extra_data or {}).items() if k not in _DRIFT_EXTRA}
        if extra:
            fields["extra_data"] = extra
    return fields


_DRIFT_EXTRA = {"current_stats", "drift_measures", "drift_status"}


def _number(value: Any) -> Any:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return None if math.isnan(number) or math.isinf(number) else number


def open_monitor(
    stream: str,
    store: str | None = None,
    settings: MonitorSettings | None = None,
    group: str = "mlserve-monitor",
    results: str | None = None,
    alert_webhook: str | None = None,
    applications: Sequence[Any] = (),
    registry: Any = None,
    thresholds: Any = None,
) -> Monitor:
    """A monitor of ``stream`` into the endpoint store at ``store`` (an SQLAlchemy URL;
    default: the data dir's SQLite file), with its outputs: drift gauges on the
    Prometheus ``registry``, a ``results`` stream (any model-log target URL), an
    ``alert_webhook``."""
    from mlserve.monitoring.sources import open_source
    from mlserve.monitoring.stores import default_store_url, open_store

    store_url = store or default_store_url()
    outputs: list[MonitorOutput] = []
    gauges = None
    if registry is not None:
        from mlserve.monitoring.gauges import DriftGauges

        gauges = DriftGauges(registry)
    if results:
        from mlserve.monitoring.results_stream import ResultsStream

        outputs.append(ResultsOutput(ResultsStream(results)))
    if alert_webhook:
        from mlserve.monitoring.alerts import DriftAlerts

        outputs.append(AlertsOutput(DriftAlerts(alert_webhook)))
    monitor = Monitor(
        open_source(stream, group=group),
        open_store(store_url),
        settings,
        applications,
        outputs,
        thresholds,
        gauges,
        reopen=lambda: open_source(stream, group=group),
    )
    monitor.store_url = store_url
    return monitor


class MonitorThread:
    """A monitor on an event loop of its own, in a thread (``serve --monitor``): the
    server's loop never runs the monitor's steps."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="mlserve-monitor")

    def start(self) -> None:
        self._thread.start()
        self._started.wait(10)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._started.set()
            await self.monitor.run(self._stop)

        asyncio.run(main())

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the step under way; open windows are read again on the next start."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
