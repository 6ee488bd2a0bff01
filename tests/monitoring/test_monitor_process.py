"""The monitor's promises kept by real processes: ``mlserve serve --monitor`` and
``mlserve monitor`` started as commands, killed and restarted by PID, over a file
stream, Redis Streams and a Kafka consumer group (docs/monitoring.md#drift)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

import mlserve
from mlserve.monitoring import feature_stats
from mlserve.monitoring.monitor import uid_of_record
from mlserve.monitoring.stores import open_store
from tests.monitoring.conftest import SumModel, unique, wait_for
from tests.monitoring.test_drift_page import rgb
from tests.netserver import ROOT, start_server
from tests.services import free_port, wait_for_port

FEATURES = ["a", "b", "c", "d"]
CENTERS = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]])
"""The flowers' class centers (examples/train_flowers.py)."""


# ---- helpers ------------------------------------------------------------------------------


class MonitorProcess:
    """``python -m mlserve monitor ARGS`` in the repository, its output in ``log``."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlserve", "monitor", *args],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: "mlserve: monitoring" in self.output() or self.proc.poll() is not None)
        assert self.proc.poll() is None, self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM: the monitor ends its step and leaves."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def monitors(tmp_path: Path) -> Iterator[Callable[..., MonitorProcess]]:
    """Start monitors (``name``, args); every one still running is stopped after the test."""
    started: list[MonitorProcess] = []

    def start(name: str, *args: str) -> MonitorProcess:
        process = MonitorProcess(tmp_path / f"{name}.log", *args)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def training() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(rng.normal(0.0, 1.0, size=(4000, 4)), columns=FEATURES)


def scorer_function(stream: str, store: str, models: list[str], **tracking: Any) -> Any:
    """A mock server of a function of its own project (``server.project``: a store may be
    shared by tests) whose ``models`` (SumModel, all with the reference of
    ``training()``) log to ``stream`` and register in ``store``."""
    stats = feature_stats(training())
    fn = mlserve.new_function("fn", project=unique("watch"))
    for model in models:
        fn.add_model(model, class_name=SumModel, feature_stats=stats)
    fn.spec.parameters.update(endpoint_store_url=store, endpoint_flush_seconds=0.2)
    fn.set_tracking(stream, **tracking)
    return fn.to_mock_server(track_models=True)


def results(*files: Path) -> list[dict[str, Any]]:
    """The results streams' records (one per endpoint and window)."""
    found: list[dict[str, Any]] = []
    for file in files:
        if file.exists():
            *lines, _partial = file.read_bytes().split(b"\n")  # a last line may be half-written
            found.extend(json.loads(line) for line in lines if line)
    return found


def windows_by_endpoint(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each endpoint's windows, in order; fails on a window written twice."""
    by: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by.setdefault(record["endpoint_id"], []).append(record["window"])
    for uid, windows in by.items():
        starts = [w["start"] for w in windows]
        assert len(starts) == len(set(starts)), (uid, sorted(starts))
        windows.sort(key=lambda w: w["start"])
    return by


def calls_logged(stream: Path) -> dict[str, int]:
    """The calls of each endpoint in a file stream (a record is one call)."""
    counts: dict[str, int] = {}
    for line in stream.read_bytes().splitlines():
        uid = uid_of_record(json.loads(line))
        counts[uid] = counts.get(uid, 0) + 1
    return counts


def requests_in(records: list[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for uid, windows in windows_by_endpoint(records).items():
        totals[uid] = sum(w["requests"] for w in windows)
    return totals


def counted_all(files: list[Path], sent: dict[str, int], timeout: float = 30.0) -> None:
    """Wait until the windows in the results ``files`` count each endpoint's calls as
    ``sent``; fails with both when they never do."""
    try:
        wait_for(lambda: requests_in(results(*files)) == sent, timeout=timeout)
    except AssertionError:
        assert requests_in(results(*files)) == sent
    windows_by_endpoint(results(*files))  # and no window twice


def at_window_start(window: float) -> None:
    time.sleep(window - time.time() % window + 0.02)


class Webhook:
    """A real HTTP receiver of alerts on a free port; ``bodies`` in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Webhook]:
    receiver = Webhook()
    yield receiver
    receiver.close()


# ---- serve --monitor ----------------------------------------------------------------------


def flowers(rng: np.random.Generator, n: int, shift: float) -> list[list[float]]:
    rows = CENTERS[rng.integers(0, 3, n)] + rng.normal(0.0, 0.35, size=(n, 4)) + shift
    return [[float(v) for v in row] for row in rows]


def test_serve_monitor_one_command(tmp_path: Path, page: Any) -> None:
    data = tmp_path / "data"
    store = f"sqlite:///{data / 'endpoints.db'}"
    server = start_server(
        "--monitor",
        "--monitor-window",
        "2",
        target="examples/serving.py",
        env={"MLSERVE_DATA_DIR": str(data)},
    )
    rng = np.random.default_rng(5)
    base = f"{server.url}/api/v1/projects/default/model-endpoints"
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            listed = http.get(base).json()["endpoints"]
            (uid,) = [
                e["metadata"]["uid"] for e in listed if e["spec"]["model"] == "flowers:latest"
            ]
            for shift, status in ((0.0, "NO_DRIFT"), (1.5, "DRIFT_DETECTED")):
                at_window_start(2.0)
                for _ in range(30):
                    answer = http.post(
                        "/v2/models/flowers/infer", json={"inputs": flowers(rng, 10, shift)}
                    )
                    assert answer.status_code == 200, answer.text
                sent_at = time.time()

                def written(sent_at: float = sent_at) -> dict[str, Any] | None:
                    record = http.get(f"{base}/{uid}").json()
                    window = record["status"].get("window") or {}
                    ended = window and pd.Timestamp(window["end"]).timestamp() > sent_at
                    return record if ended else None

                wait_for(written, timeout=30)
                record = written()
                assert record is not None
                window = record["status"]["window"]
                assert window["requests"] == 30 and window["errors"] == 0
                assert window["latency_p50_us"] > 0
                assert record["status"]["drift_status"] == status, record["status"]
            metrics = http.get("/metrics").text
        line = re.search(
            rf'^mlserve_model_drift_status\{{[^}}]*endpoint_id="{uid}"[^}}]*\}} (\S+)$',
            metrics,
            re.M,
        )
        assert line is not None and float(line[1]) == 2.0
    finally:
        assert server.stop() == 0

    shown = cli("endpoints", "get", uid, "--store", store)
    assert json.loads(shown)["status"]["drift_status"] == "DRIFT_DETECTED"
    html = tmp_path / "out.html"
    assert "wrote" in cli("endpoints", "drift", uid, "--store", store, "--html", str(html))
    page.goto(html.as_uri())
    assert page.eval_on_selector("#general-status", "e => e.dataset.status") == "DRIFT_DETECTED"
    drifted = page.locator('td.drift[data-status="DRIFT_DETECTED"]')
    assert drifted.count() >= 1
    for i in range(drifted.count()):
        feature = drifted.nth(i).evaluate("e => e.closest('tr').dataset.feature")
        red, green, blue = rgb(page, f'tr[data-feature="{feature}"] td.drift')
        assert red > 150 and green < 80 and blue < 80


def cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mlserve", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# ---- mlserve monitor on a file stream -----------------------------------------------------


def send_window(server: Any, model: str, rows: np.ndarray, window: float) -> None:
    """``rows``, 20 a call, all in one window."""
    at_window_start(window)
    for i in range(0, len(rows), 20):
        server.test(f"/v2/models/{model}/infer", body={"inputs": rows[i : i + 20].tolist()})


def test_file_stream_alert_once_and_results(tmp_path: Path, monitors: Any, hook: Webhook) -> None:
    stream, results_file = tmp_path / "logs.jsonl", tmp_path / "results.jsonl"
    store = f"sqlite:///{tmp_path / 'endpoints.db'}"
    server = scorer_function(str(stream), store, ["scorer"])
    monitor = monitors(
        "monitor",
        *("--stream", str(stream), "--store", store, "--window", "1", "--grace", "0.3"),
        *("--alert-webhook", hook.url, "--results", str(results_file)),
    )
    rng = np.random.default_rng(11)
    for shift in (0.0, 2.5, 2.5):  # no drift, then drift that stays
        send_window(server, "scorer", rng.normal(shift, 1.0, size=(300, 4)), 1.0)
    server.wait_for_completion()  # every call on the stream
    counted_all([results_file], calls_logged(stream), timeout=20)
    time.sleep(0.5)  # an alert sent twice would be here by now
    assert monitor.stop() == 0, monitor.output()
    by = windows_by_endpoint(results(results_file))
    (uid,) = by
    statuses = [r["drift_status"] for r in results(results_file)]
    assert statuses == ["NO_DRIFT", "DRIFT_DETECTED", "DRIFT_DETECTED"]
    assert [w["requests"] for w in by[uid]] == [15, 15, 15]
    (alert,) = hook.bodies
    assert alert["endpoint_id"] == uid and alert["event"] == "data-drift-detected"
    assert (alert["previous_status"], alert["status"]) == ("NO_DRIFT", "DRIFT_DETECTED")
    assert alert["window"] == by[uid][1]  # the window it rose in


def test_killed_mid_window_counts_every_call_once(
    tmp_path: Path, monitors: Any, hook: Webhook
) -> None:
    """... and the restarted monitor does not alert again on the drift already reported
    (every row is [1, 2, 3, 4], far from the reference)."""
    stream, results_file = tmp_path / "logs.jsonl", tmp_path / "results.jsonl"
    store = f"sqlite:///{tmp_path / 'endpoints.db'}"
    server = scorer_function(str(stream), store, ["scorer"])
    args = ["--stream", str(stream), "--store", store, "--window", "1", "--grace", "0.3"]
    args += ["--alert-webhook", hook.url, "--results", str(results_file)]
    first = monitors("first", *args)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            server.test("/v2/models/scorer/infer", body={"inputs": [[1.0, 2.0, 3.0, 4.0]]})
            time.sleep(0.01)

    sender = threading.Thread(target=traffic)
    sender.start()
    try:
        wait_for(lambda: results(results_file) and hook.bodies, timeout=20)
        at_window_start(1.0)
        time.sleep(0.5)  # mid-window, with records of the open window read
        first.kill()
        time.sleep(1.0)  # a window passes while no monitor runs
        second = monitors("second", *args)
        time.sleep(1.0)
    finally:
        stop.set()
        sender.join()
        server.wait_for_completion()
    logged = calls_logged(stream)
    counted_all([results_file], logged, timeout=20)
    assert second.stop() == 0, second.output()
    assert {r["drift_status"] for r in results(results_file)} == {"DRIFT_DETECTED"}
    assert [alert["status"] for alert in hook.bodies] == ["DRIFT_DETECTED"]


# ---- a Kafka consumer group ---------------------------------------------------------------


KAFKA_MODELS = ["m0", "m1", "m2", "m3", "m4", "m5"]


def kafka_traffic(server: Any, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for model in KAFKA_MODELS:
            server.test(f"/v2/models/{model}/infer", body={"inputs": [[1.0, 2.0, 3.0, 4.0]]})
        time.sleep(0.02)


def sent_per_endpoint(server: Any, store_url: str) -> dict[str, int]:
    """The calls each endpoint of ``server``'s project served, as the server counted them."""
    store = open_store(store_url)
    try:
        endpoints = store.list(server.project)
        return {e.metadata.uid: int(e.status.metrics.get("requests", 0)) for e in endpoints}
    finally:
        store.close()


def test_kafka_restarted_monitor_resumes_from_committed_offsets(
    tmp_path: Path, kafka: Any, postgres: Any, monitors: Any
) -> None:
    topic, group = unique("logs"), unique("g")
    stream = f"kafka://{kafka.url}?topic={topic}"
    store = postgres.url
    server = scorer_function(stream, store, KAFKA_MODELS)
    args = ("--stream", stream, "--group", group, "--store", store, "--window", "1")
    file = tmp_path / "results.jsonl"
    kafka_traffic(server, 0.2)  # the topic exists (4 partitions) before the group joins
    first = monitors("first", *args, "--grace", "0.3", "--results", str(file))
    kafka_traffic(server, 0.5)
    wait_for(lambda: results(file), timeout=30)
    assert first.stop() == 0, first.output()
    kafka_traffic(server, 0.5)  # read by nobody, until the restart
    monitors("second", *args, "--grace", "0.3", "--results", str(file))
    server.wait_for_completion()
    sent = sent_per_endpoint(server, store)
    counted_all([file], sent, timeout=30)


def test_kafka_group_survivor_takes_the_killed_ones_partitions(
    tmp_path: Path, kafka: Any, postgres: Any, monitors: Any
) -> None:
    topic, group = unique("logs"), unique("g")
    stream = f"kafka://{kafka.url}?topic={topic}"
    store = postgres.url
    server = scorer_function(stream, store, KAFKA_MODELS)
    kafka_traffic(server, 0.2)  # the topic exists (4 partitions) before the group joins
    # A killed member's partitions move after its session times out: a short one.
    consumer = f"{stream}&session.timeout.ms=2000&heartbeat.interval.ms=300"
    args = ("--stream", consumer, "--group", group, "--store", store, "--window", "1")
    files = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    one = monitors("a", *args, "--grace", "0.3", "--results", str(files[0]))
    two = monitors("b", *args, "--grace", "0.3", "--results", str(files[1]))
    try:
        wait_for(lambda: results(files[0]) and results(files[1]), timeout=30)
        kafka_traffic(server, 0.5)
        one.kill()  # mid-window: it holds open windows of its partitions
        killed_at = time.time()
        kafka_traffic(server, 1.5)
    finally:
        server.wait_for_completion()
    sent = sent_per_endpoint(server, store)
    assert len(sent) == len(KAFKA_MODELS) and all(sent.values())
    counted_all(files, sent, timeout=40)
    # After the kill the survivor counts every endpoint: the killed one's too.
    assert results(files[0])
    after = windows_by_endpoint(results(files[1]))
    for uid in sent:
        assert any(pd.Timestamp(w["end"]).timestamp() > killed_at for w in after[uid])
    assert two.stop() == 0, two.output()


# ---- Redis Streams ------------------------------------------------------------------------


def test_redis_stream_windows_written(tmp_path: Path, redis_server: Any, monitors: Any) -> None:
    stream = f"{redis_server.url}/0?stream={unique('logs')}"
    store = f"sqlite:///{tmp_path / 'endpoints.db'}"
    file = tmp_path / "results.jsonl"
    server = scorer_function(stream, store, ["scorer"])
    monitors(
        "monitor",
        *("--stream", stream, "--store", store, "--window", "1", "--grace", "0.3"),
        *("--results", str(file)),
    )
    rng = np.random.default_rng(2)
    send_window(server, "scorer", rng.normal(0.0, 1.0, size=(200, 4)), 1.0)
    server.wait_for_completion()
    sent = sent_per_endpoint(server, store)
    counted_all([file], sent, timeout=20)
    (record,) = results(file)
    assert record["drift_status"] == "NO_DRIFT" and record["window"]["requests"] == 10
    stored = open_store(store)
    try:
        endpoint = stored.get(record["endpoint_id"])
    finally:
        stored.close()
    assert endpoint is not None and endpoint.status.window["requests"] == 10


# ---- bad input ----------------------------------------------------------------------------


def test_malformed_line_counted_and_skipped(tmp_path: Path, monitors: Any) -> None:
    stream, file = tmp_path / "logs.jsonl", tmp_path / "results.jsonl"
    store = f"sqlite:///{tmp_path / 'endpoints.db'}"
    server = scorer_function(str(stream), store, ["scorer"])
    for _ in range(2):
        server.test("/v2/models/scorer/infer", body={"inputs": [[1.0, 2.0, 3.0, 4.0]]})
    server.wait_for_completion()
    first, second = stream.read_bytes().splitlines(keepends=True)
    bad = b'{"not": "a record"\n{"model": "scorer", "when": "yesterday"}\n'  # not JSON; no call
    stream.write_bytes(first + bad + second)
    port = free_port()
    monitors(
        "monitor",
        *("--stream", str(stream), "--store", store, "--window", "1", "--grace", "0.3"),
        *("--results", str(file), "--metrics-port", str(port)),
    )
    wait_for_port(port)

    def counted() -> dict[str, float]:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        found = re.findall(r'^mlserve_monitor_records_total\{result="(\w+)"\} (\S+)$', text, re.M)
        return {result: float(value) for result, value in found}

    wait_for(lambda: counted().get("malformed") == 2.0 and counted().get("counted") == 2.0)
    counted_all([file], sent_per_endpoint(server, store))
    assert sum(sent_per_endpoint(server, store).values()) == 2


def test_sigterm_right_after_the_announce_stops_cleanly(tmp_path: Path) -> None:
    """The announce line comes once SIGTERM ends the monitor cleanly (exit 0): a
    supervisor may stop it at once."""
    command = [sys.executable, "-m", "mlserve", "monitor", "--stream", str(tmp_path / "s.jsonl")]
    command += ["--store", f"sqlite:///{tmp_path / 'e.db'}"]
    for _ in range(2):
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"mlserve: monitoring")
        proc.terminate()
        assert proc.wait(30) == 0
        proc.stdout.close()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--stream", "http://x"), "cannot be read back"),
        (("--stream", "kafka://127.0.0.1:9?topic=t&sesion.timeout.ms=1"), "sesion.timeout.ms"),
        (("--stream", "logs.jsonl", "--application", "nosuch:Class"), "nosuch:Class"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlserve",
            "monitor",
            *args,
            "--store",
            f"sqlite:///{tmp_path}/e.db",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
