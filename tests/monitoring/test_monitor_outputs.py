"""The monitor's outputs against real receivers: the drift alert webhook (a local HTTP
server), the Prometheus gauges (read back as text), and the results stream (a file, a
Redis server that goes down and up again)."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mlserve.monitoring.alerts import DriftAlerts
from mlserve.monitoring.endpoints import (
    EndpointMetadata,
    EndpointSpec,
    EndpointStatus,
    ModelEndpoint,
)
from mlserve.monitoring.gauges import DriftGauges
from mlserve.monitoring.results_stream import ResultsStream
from mlserve.monitoring.streams.memory import MemoryStream
from tests import services
from tests.monitoring.conftest import unique, wait_for

WINDOW = {
    "start": "2026-01-01T00:00:00+00:00",
    "end": "2026-01-01T00:10:00+00:00",
    "requests": 40,
    "errors": 2,
    "late": 1,
    "latency_mean_us": 1500,
    "latency_p50_us": 1000,
    "latency_p99_us": 9000,
    "predictions_per_second": 0.0667,
}
MEASURES = {
    "f0": {"tvd": 0.1, "hellinger": 0.2, "kld": 0.3},
    "f1": {"tvd": 0.5, "hellinger": 0.6, "kld": math.inf},
    "tvd_mean": 0.3,
    "hellinger_mean": 0.4,
    "kld_mean": math.inf,
    "general_drift": 0.35,
}
SUMMARY = {"general_drift": 0.35, "drift_measures": MEASURES, "window": WINDOW}


def endpoint(uid: str = "ep1", model: str = "m1:latest", drift_status: str = "") -> ModelEndpoint:
    return ModelEndpoint(
        metadata=EndpointMetadata(project="proj", uid=uid),
        spec=EndpointSpec(function_uri="proj/fn", model=model),
        status=EndpointStatus(drift_status=drift_status),
    )


class Receiver:
    """A local HTTP server that keeps every JSON body POSTed to it and answers the
    statuses of ``script`` in turn (then 200); ``hold`` set, it waits for ``release``."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.script: list[int] = []
        self.hold = False
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers["Content-Length"])
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                if receiver.hold:
                    receiver.release.wait(20)
                status = receiver.script.pop(0) if receiver.script else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                """Quiet."""

        self.httpd = ThreadingHTTPServer(("127.0.0.1", services.free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/alerts"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


# ---- the alert webhook ----


def test_one_alert_per_rise_of_the_drift_status(receiver: Receiver) -> None:
    alerts = DriftAlerts(receiver.url, backoff=0.01)
    ep = endpoint()
    for status in (
        "NO_DRIFT",
        "POSSIBLE_DRIFT",  # rises: alert
        "POSSIBLE_DRIFT",
        "DRIFT_DETECTED",  # rises: alert
        "DRIFT_DETECTED",
        "NO_DRIFT",
        "",
        "DRIFT_DETECTED",  # rises again: alert
        "POSSIBLE_DRIFT",
    ):
        alerts.observe(ep, status, SUMMARY)
    alerts.close()
    assert [(b["previous_status"], b["status"], b["event"]) for b in receiver.bodies] == [
        ("NO_DRIFT", "POSSIBLE_DRIFT", "data-drift-suspected"),
        ("POSSIBLE_DRIFT", "DRIFT_DETECTED", "data-drift-detected"),
        ("", "DRIFT_DETECTED", "data-drift-detected"),
    ]
    assert (alerts.sent, alerts.failed, alerts.dropped) == (3, 0, 0)
    first = receiver.bodies[0]
    assert first["kind"] == "drift"
    assert (first["endpoint_id"], first["project"], first["model"], first["function_uri"]) == (
        "ep1",
        "proj",
        "m1:latest",
        "proj/fn",
    )
    assert first["general_drift"] == 0.35
    assert first["window"] == WINDOW
    assert first["drift_measures"]["f0"] == {"tvd": 0.1, "hellinger": 0.2, "kld": 0.3}
    assert first["drift_measures"]["f1"]["kld"] is None  # strict JSON: inf is null
    assert first["timestamp"].endswith("+00:00")


def test_each_endpoint_starts_from_the_status_its_record_holds(receiver: Receiver) -> None:
    alerts = DriftAlerts(receiver.url)
    drifted = endpoint("a", drift_status="DRIFT_DETECTED")  # alerted before a restart
    possible = endpoint("b", drift_status="POSSIBLE_DRIFT")
    alerts.observe(drifted, "DRIFT_DETECTED", SUMMARY)
    alerts.observe(possible, "DRIFT_DETECTED", SUMMARY)
    alerts.close()
    assert [(b["endpoint_id"], b["previous_status"]) for b in receiver.bodies] == [
        ("b", "POSSIBLE_DRIFT")
    ]


def test_an_alert_is_retried_past_server_errors(receiver: Receiver) -> None:
    receiver.script = [500, 503]
    alerts = DriftAlerts(receiver.url, retries=3, backoff=0.01)
    alerts.observe(endpoint(), "DRIFT_DETECTED", SUMMARY)
    wait_for(lambda: alerts.sent)
    alerts.close()
    assert len(receiver.bodies) == 3
    assert receiver.bodies[0] == receiver.bodies[2]  # the same alert, sent again
    assert (alerts.sent, alerts.failed, alerts.dropped) == (1, 0, 0)


def test_a_refused_alert_is_not_retried(receiver: Receiver) -> None:
    receiver.script = [400, 400]
    alerts = DriftAlerts(receiver.url, retries=3, backoff=0.01)
    alerts.observe(endpoint(), "DRIFT_DETECTED", SUMMARY)
    wait_for(lambda: alerts.failed)
    alerts.close()
    assert len(receiver.bodies) == 1
    assert (alerts.sent, alerts.failed) == (0, 1)


def test_a_closed_port_never_raises_and_counts_failed() -> None:
    url = f"http://127.0.0.1:{services.free_port()}/alerts"  # nothing listens there
    alerts = DriftAlerts(url, retries=2, backoff=0.01, timeout=2.0)
    alerts.observe(endpoint("a"), "POSSIBLE_DRIFT", SUMMARY)
    alerts.observe(endpoint("b"), "DRIFT_DETECTED", SUMMARY)
    wait_for(lambda: alerts.failed == 2)
    alerts.close()
    assert (alerts.sent, alerts.failed, alerts.dropped) == (0, 2, 0)


def test_past_the_queue_bound_alerts_are_dropped_and_counted(receiver: Receiver) -> None:
    receiver.hold = True  # the first alert keeps the sender busy
    alerts = DriftAlerts(receiver.url, max_queue=1)
    for uid in ("a", "b", "c", "d"):
        alerts.observe(endpoint(uid), "DRIFT_DETECTED", SUMMARY)
    receiver.release.set()
    alerts.close()
    assert alerts.dropped >= 2
    assert alerts.sent + alerts.dropped == 4
    assert receiver.bodies[-1]["endpoint_id"] == "d"  # the oldest gave way, not the newest


def test_bad_alert_settings_and_statuses_are_refused(receiver: Receiver) -> None:
    with pytest.raises(ValueError, match="http"):
        DriftAlerts("ftp://example.com/x")
    alerts = DriftAlerts(receiver.url)
    with pytest.raises(ValueError, match="unknown drift status"):
        alerts.observe(endpoint(), "VERY_DRIFTY", SUMMARY)
    alerts.close()
    assert receiver.bodies == []


# ---- Prometheus gauges ----


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_gauges_read_back_with_their_labels() -> None:
    registry = CollectorRegistry()
    gauges = DriftGauges(registry)
    gauges.update(endpoint(), MEASURES, "POSSIBLE_DRIFT", WINDOW)
    got = samples(registry)
    ep = {("endpoint_id", "ep1"), ("model", "m1:latest")}

    def drift(metric: str, feature: str) -> float:
        labels = ep | {("metric", metric), ("feature", feature)}
        return got[("mlserve_model_drift", frozenset(labels))]

    assert drift("tvd", "f0") == 0.1
    assert drift("hellinger", "f1") == 0.6
    assert drift("kld", "f1") == math.inf
    assert drift("general_drift", "") == 0.35
    assert drift("kld_mean", "") == math.inf
    assert got[("mlserve_model_drift_status", frozenset(ep))] == 1
    assert got[("mlserve_monitor_window_requests", frozenset(ep))] == 40
    assert got[("mlserve_monitor_window_errors", frozenset(ep))] == 2
    assert got[("mlserve_monitor_window_predictions_per_second", frozenset(ep))] == 0.0667
    latency = {
        q: got[("mlserve_monitor_window_latency_seconds", frozenset(ep | {("quantile", q)}))]
        for q in ("0.5", "0.99", "mean")
    }
    assert latency == {"0.5": 0.001, "0.99": 0.009, "mean": 0.0015}


def test_gauges_follow_the_last_window() -> None:
    registry = CollectorRegistry()
    gauges = DriftGauges(registry)
    gauges.update(endpoint(), MEASURES, "DRIFT_DETECTED", WINDOW)
    only_f0 = {"f0": {"tvd": None, "hellinger": 0.2, "kld": 0.3}, "general_drift": 0.1}
    gauges.update(endpoint(), only_f0, "", {"requests": 0})
    got = samples(registry)
    features = {dict(labels)["feature"] for name, labels in got if name == "mlserve_model_drift"}
    assert features == {"f0", ""}  # f1's series are gone
    ep = frozenset({("endpoint_id", "ep1"), ("model", "m1:latest")})
    assert got[("mlserve_model_drift_status", ep)] == -1  # no reference: unknown
    tvd = ep | {("metric", "tvd"), ("feature", "f0")}
    assert math.isnan(got[("mlserve_model_drift", tvd)])  # a missing value is NaN
    assert math.isnan(got[("mlserve_monitor_window_errors", ep)])
    assert got[("mlserve_monitor_window_requests", ep)] == 0


def test_the_monitor_counters() -> None:
    registry = CollectorRegistry()
    gauges = DriftGauges(registry)
    gauges.count_records("counted", 5)
    gauges.count_records("late")
    gauges.count_application_error("histogram-data-drift")
    got = samples(registry)
    counted = {
        dict(labels)["result"]: value
        for (name, labels), value in got.items()
        if name == "mlserve_monitor_records_total"
    }
    assert counted == {"counted": 5, "malformed": 0, "late": 1, "skipped": 0}
    app = frozenset({("application", "histogram-data-drift")})
    assert got[("mlserve_monitor_application_errors_total", app)] == 1
    with pytest.raises(ValueError, match="unknown record result"):
        gauges.count_records("eaten")


# ---- the results stream ----


def windowed(uid: str = "ep1") -> ModelEndpoint:
    ep = endpoint(uid)
    ep.status.window = WINDOW
    ep.status.drift_status = "POSSIBLE_DRIFT"
    ep.status.drift_measures = MEASURES
    ep.status.current_stats = {"f0": {"count": 40, "mean": math.nan}}
    ep.status.results = {"app": {"score": {"value": 0.5, "kind": 0, "status": 1}}}
    return ep


def test_results_go_to_a_file_as_strict_json(tmp_path: Path) -> None:
    path = tmp_path / "results" / "windows.jsonl"
    stream = ResultsStream(str(path))
    assert stream.write(windowed("a")) and stream.write(windowed("b"))
    stream.close()
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    assert [r["endpoint_id"] for r in records] == ["a", "b"]
    record = records[0]
    assert (record["project"], record["model"], record["function_uri"]) == (
        "proj",
        "m1:latest",
        "proj/fn",
    )
    assert record["window"] == WINDOW
    assert record["drift_status"] == "POSSIBLE_DRIFT"
    assert record["general_drift"] == 0.35
    assert record["drift_measures"]["kld_mean"] is None  # inf
    assert record["current_stats"] == {"f0": {"count": 40, "mean": None}}  # NaN
    assert record["results"] == {"app": {"score": {"value": 0.5, "kind": 0, "status": 1}}}
    assert (stream.sent, stream.failed, stream.dropped) == (2, 0, 0)


def test_a_target_of_dicts_gets_the_strict_values() -> None:
    name = unique("results")
    stream = ResultsStream(f"dummy://{name}")
    stream.write(windowed())
    (record,) = MemoryStream(f"dummy://{name}").records
    assert record["drift_measures"]["f1"]["kld"] is None


def redis_records(url: str, stream: str) -> list[dict[str, Any]]:
    import redis

    client: Any = redis.Redis.from_url(url)
    return [json.loads(fields[b"record"]) for _, fields in client.xrange(stream)]


def test_results_go_to_a_redis_stream(redis_server: Any) -> None:
    name = unique("results")
    stream = ResultsStream(f"{redis_server.url}/0?stream={name}")
    stream.write(windowed("a"))
    stream.write(windowed("b"))
    stream.close()
    records = redis_records(redis_server.url, name)
    assert [r["endpoint_id"] for r in records] == ["a", "b"]
    assert records[0]["drift_measures"]["f0"] == {"tvd": 0.1, "hellinger": 0.2, "kld": 0.3}


def test_results_wait_for_a_target_that_is_down() -> None:
    server = services.start_redis()
    try:
        name = unique("results")
        stream = ResultsStream(f"{server.url}/0?stream={name}", socket_timeout=2.0)
        server.kill()
        assert not stream.write(windowed("a"))  # kept, not raised
        assert not stream.write(windowed("b"))
        assert (stream.sent, stream.failed) == (0, 3)  # a, then a and b
        server.start()
        assert stream.write(windowed("c"))
        stream.close()
        ids = [r["endpoint_id"] for r in redis_records(server.url, name)]
        assert ids == ["a", "b", "c"]
        assert (stream.sent, stream.dropped) == (3, 0)
    finally:
        server.stop()


def test_pending_results_are_bounded(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the stream wants a folder")
    stream = ResultsStream(str(blocked / "windows.jsonl"), max_pending=2)
    for uid in ("a", "b", "c"):
        assert not stream.write(windowed(uid))
    assert (stream.sent, stream.dropped) == (0, 1)
    stream.close()
    assert stream.dropped == 3  # what was still pending at close
