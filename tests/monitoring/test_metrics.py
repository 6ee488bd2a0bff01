"""Prometheus metrics (docs/monitoring.md#prometheus-metrics): per model and operation,
load times, stream counts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import mlserve
from mlserve.monitoring.metrics import REGISTRY
from tests.monitoring.conftest import FailingModel, SumModel, unique

ROOT = Path(__file__).resolve().parents[2]
ROWS = {"inputs": [[1, 2]]}


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_requests_errors_latency_and_load_time_per_model() -> None:
    good, bad = unique("good"), unique("bad")
    fn = mlserve.new_function("fn")
    fn.add_model(f"{good}:v1", class_name=SumModel)
    fn.add_model(bad, class_name=FailingModel)
    server = fn.to_mock_server()  # monitoring off: the metrics are still kept
    for _ in range(3):
        server.test(f"/v2/models/{good}/infer", ROWS)
    server.test(f"/v2/models/{good}/explain", ROWS, silent=True)
    server.test(f"/v2/models/{bad}/infer", ROWS, silent=True)
    labels = {"model": good, "version": "v1", "operation": "infer"}
    assert value("mlserve_model_requests_total", **labels) == 3
    assert value("mlserve_model_errors_total", **labels) == 0
    assert value("mlserve_model_latency_seconds_count", **labels) == 3
    explain = {**labels, "operation": "explain"}
    assert value("mlserve_model_errors_total", **explain) == 1
    failed = {"model": bad, "version": "", "operation": "infer"}
    assert value("mlserve_model_requests_total", **failed) == 1
    assert value("mlserve_model_errors_total", **failed) == 1
    load = REGISTRY.get_sample_value("mlserve_model_load_seconds", {"model": good, "version": "v1"})
    assert load is not None and load >= 0


def test_stream_sent_is_counted(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}")
    server.test("/v2/models/m1/infer", ROWS)
    server.wait_for_completion()
    assert value("mlserve_stream_sent_total", stream=f"dummy://{name}") == 1


def test_import_mlserve_loads_no_stream_client_or_database() -> None:
    code = (
        "import sys, mlserve; heavy = [m for m in ('prometheus_client', 'sqlalchemy', "
        "'confluent_kafka', 'redis', 'mlserve.monitoring.pusher') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_recorded_latencies_fall_in_their_buckets_across_folds() -> None:
    from mlserve.core.recorder import FOLD_AT, LATENCY_BUCKETS, ModelRecorder

    recorder = ModelRecorder("m", "1")
    latencies_ns = [400_000, 500_000, 500_001, 7_000_000, 20_000_000_000]  # <=0.5 ms twice, ...
    rounds = FOLD_AT  # several folds on the way
    for _ in range(rounds):
        for elapsed_ns in latencies_ns:
            recorder.ok("infer", elapsed_ns)
    recorder.ok("explain", 1)
    recorder.error("infer")
    snap = {op: tuple(counts) for op, *counts, _ in recorder.snapshot()}
    requests, errors, seconds, buckets = snap["infer"]
    assert (requests, errors) == (5 * rounds + 1, 1)
    assert abs(seconds - rounds * sum(latencies_ns) / 1e9) < 1e-6 * seconds
    expected = [0] * (len(LATENCY_BUCKETS) + 1)
    for elapsed_ns in latencies_ns:
        index = next((i for i, b in enumerate(LATENCY_BUCKETS) if elapsed_ns / 1e9 <= b), -1)
        expected[index] += rounds
    assert buckets == expected
    assert snap["explain"][:2] == (1, 0) and snap["explain"][3][0] == 1
