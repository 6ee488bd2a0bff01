"""The monitor end to end, in process: a served model's calls on the model-log stream,
windows written to its endpoint record, drift as mlrun's code computes it on the same
window, applications that fail alone (mlserve/monitoring/monitor.py)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd
import pytest

import mlserve
from mlserve.monitoring import (
    ModelMonitoringApplicationBase,
    ModelMonitoringApplicationResult,
    ResultKindApp,
    ResultStatusApp,
    feature_stats,
)
from mlserve.monitoring.monitor import MonitorSettings, MonitorThread, open_monitor
from mlserve.monitoring.stores import open_store
from mlserve.monitoring.windows import epoch_of
from tests.monitoring.conftest import SumModel, wait_for
from tests.monitoring.mlrun_reference import WHEEL, mlrun_drift

FEATURES = ["a", "b", "c", "d"]
WINDOW = 2.0


def training() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame(rng.normal(0.0, 1.0, size=(4000, 4)), columns=FEATURES)


class RowCount(ModelMonitoringApplicationBase):
    """A custom application, written as for mlrun: the window's row count."""

    NAME = "row-count"

    def do_tracking(self, monitoring_context: Any) -> ModelMonitoringApplicationResult:
        rows = len(monitoring_context.sample_df)
        return ModelMonitoringApplicationResult(
            name="rows",
            value=rows,
            kind=ResultKindApp.model_performance,
            status=ResultStatusApp.no_detection,
        )


class Broken(ModelMonitoringApplicationBase):
    NAME = "broken"

    def do_tracking(self, monitoring_context: Any) -> Any:
        raise RuntimeError("this application always fails")


def serve(tmp_path: Path) -> tuple[Any, str, str]:
    stream = str(tmp_path / "logs.jsonl")
    store = f"sqlite:///{tmp_path / 'endpoints.db'}"
    fn = mlserve.new_function("drifty", project="watch")
    fn.add_model("scorer", class_name=SumModel, feature_stats=feature_stats(training()))
    fn.spec.parameters.update(endpoint_store_url=store, endpoint_flush_seconds=0.2)
    fn.set_tracking(stream)
    server = fn.to_graph_server()
    server.init_states(namespace={})
    server.init_object({})
    return server, stream, store


def send(server: Any, rows: np.ndarray, per_request: int = 10) -> None:
    """Within one window: starts just after a window's edge."""
    time.sleep(WINDOW - time.time() % WINDOW + 0.02)
    for i in range(0, len(rows), per_request):
        server.test("/v2/models/scorer/infer", body={"inputs": rows[i : i + per_request].tolist()})


def window_rows(stream: str, start: float) -> pd.DataFrame:
    """The rows of the stream's records whose window starts at ``start``."""
    rows = []
    for line in Path(stream).read_bytes().splitlines():
        record = orjson.loads(line)
        if math.floor(epoch_of(record["when"]) / WINDOW) * WINDOW == start:
            rows.extend(record["request"]["inputs"])
    return pd.DataFrame(rows, columns=FEATURES)


@pytest.mark.skipif(not WHEEL.exists(), reason="mlrun's wheel is missing: run make install")
def test_drift_of_served_traffic_is_mlruns_to_1e9(tmp_path: Path) -> None:
    server, stream, store_url = serve(tmp_path)
    monitor = open_monitor(
        stream,
        store_url,
        MonitorSettings(window=WINDOW, grace=0.3, poll_seconds=0.05),
        applications=[RowCount(), Broken()],
    )
    thread = MonitorThread(monitor)
    thread.start()
    store = open_store(store_url)
    try:
        (endpoint,) = store.list("watch")
        uid = endpoint.metadata.uid
        assert list(endpoint.spec.feature_stats) == FEATURES
        assert endpoint.spec.feature_names == FEATURES

        rng = np.random.default_rng(11)
        for shift, status in ((0.0, "NO_DRIFT"), (2.5, "DRIFT_DETECTED")):
            send(server, rng.normal(shift, 1.0, size=(600, 4)))
            sent_at = time.time()
            wait_for(
                lambda sent_at=sent_at: (
                    (e := store.get(uid)) is not None
                    and e.status.window
                    and epoch_of(e.status.window["end"]) > sent_at
                ),
                timeout=30,
            )
            written = store.get(uid)
            assert written is not None
            window = written.status.window
            assert window["requests"] == 60 and window["errors"] == 0
            assert written.status.drift_status == status
            start = epoch_of(window["start"])
            per_feature, means, general, _ = mlrun_drift(
                training_stats(), window_rows(stream, start)
            )
            measures = written.status.drift_measures
            assert measures["general_drift"] == pytest.approx(general, abs=1e-9)
            for name, value in means.items():
                assert measures[name] == pytest.approx(value, abs=1e-9)
            for feature in FEATURES:
                for metric in ("tvd", "hellinger", "kld"):
                    assert measures[feature][metric] == pytest.approx(
                        per_feature[feature][metric], abs=1e-9
                    )
            assert written.status.results["row-count"]["rows"]["value"] == 600
            assert "broken" not in written.status.results
        assert monitor.application_errors["broken"] >= 2
    finally:
        thread.stop()
        server.wait_for_completion()
        store.close()


def training_stats() -> dict[str, Any]:
    return feature_stats(training())


class FailsOnce:
    """The real SQLite store, whose third write of windows fails (a database that went
    away for a moment): the monitor must read again from its committed position."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.writes = 0

    def write_windows(self, *args: Any, **kwargs: Any) -> None:
        self.writes += 1
        if self.writes == 3:
            raise ConnectionError("the database went away")
        self.store.write_windows(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_a_failed_write_reads_again_and_counts_every_call_once(tmp_path: Path) -> None:
    """Historic records of three endpoints over ten windows; the third write fails:
    in the end each call is in exactly one written window."""
    stream, results = tmp_path / "logs.jsonl", tmp_path / "results.jsonl"
    start = math.floor(time.time() / 1.0) - 60.0
    lines = []
    for i in range(1500):
        model = f"m{i % 3}"
        record = {
            "model": model,
            "function_uri": "watch/historic",
            "request": {"inputs": [[float(i)]]},
            "when": datetime.fromtimestamp(start + i * 0.007, UTC).isoformat(),
            "microsec": 50,
        }
        lines.append(orjson.dumps(record))
    stream.write_bytes(b"\n".join(lines) + b"\n")
    store_url = f"sqlite:///{tmp_path / 'endpoints.db'}"
    monitor = open_monitor(
        str(stream),
        store_url,
        MonitorSettings(window=1.0, grace=0.2, poll_seconds=0.05, max_records=200),
        results=str(results),
    )
    monitor.store = FailsOnce(monitor.store)
    thread = MonitorThread(monitor)
    thread.start()

    def windows() -> list[dict[str, Any]]:
        if not results.exists():
            return []
        return [orjson.loads(line) for line in results.read_bytes().splitlines()]

    try:
        wait_for(lambda: sum(w["window"]["requests"] for w in windows()) >= 1500, timeout=30)
    finally:
        thread.stop()
    written = windows()
    assert monitor.store.writes > 3  # the failed write, then the windows read again
    keys = [(w["endpoint_id"], w["window"]["start"]) for w in written]
    assert len(keys) == len(set(keys))  # no window twice
    assert sum(w["window"]["requests"] for w in written) == 1500  # every call once
