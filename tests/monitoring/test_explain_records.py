"""Explain calls in the model-log stream (``op: explain``) and in Prometheus (operation
``explain``), beside the inference calls of the same model (docs/explain.md#monitoring)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from mlserve.monitoring.metrics import REGISTRY
from mlserve.monitoring.windows import PartitionWindows
from tests.monitoring.conftest import SumModel, unique
from tests.monitoring.test_windows import stamp


class ExplainedSum(SumModel):
    """Each feature's share of the sum is the feature itself."""

    def explain(self, request: dict[str, Any]) -> Any:
        rows = [[float(v) for v in row] for row in request["inputs"]]
        return {"shap_values": rows, "base_values": [0.0], "feature_names": ["a", "b"]}


def test_explain_calls_are_logged_with_op_explain_and_counted(
    tmp_path: Path, make_server: Any
) -> None:
    name = unique("explained")
    path = tmp_path / "logs.jsonl"
    server = make_server(f"file://{path}", {name: ExplainedSum})
    server.test(f"/v2/models/{name}/infer", {"id": "i", "inputs": [[1, 2]]})
    for i in range(2):
        server.test(f"/v2/models/{name}/explain", {"id": f"e{i}", "inputs": [[1, 2], [3, 4]]})
    server.test(f"/v2/models/{name}/explain", {"id": "bad", "inputs": "x"}, silent=True)
    server.wait_for_completion()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    by_id = {r["request"]["id"]: r for r in records}
    assert [by_id[i]["op"] for i in ("i", "e0", "e1", "bad")] == [
        "infer",
        "explain",
        "explain",
        "explain",
    ]
    assert by_id["e0"]["request"]["inputs"] == [[1, 2], [3, 4]]
    assert by_id["e0"]["resp"]["outputs"]["shap_values"] == [[1.0, 2.0], [3.0, 4.0]]
    assert "error" in by_id["bad"]
    labels = {"model": name, "version": "", "operation": "explain"}
    assert REGISTRY.get_sample_value("mlserve_model_requests_total", labels) == 3
    assert REGISTRY.get_sample_value("mlserve_model_errors_total", labels) == 1
    assert REGISTRY.get_sample_value("mlserve_model_latency_seconds_count", labels) == 2
    infer = {**labels, "operation": "infer"}
    assert REGISTRY.get_sample_value("mlserve_model_requests_total", infer) == 1


def test_explained_rows_count_as_calls_but_not_in_the_drift() -> None:
    start = 1_800_000_000.0
    part = PartitionWindows(0, 10.0, 0.0, lambda r: "m", lambda v, p: p - 1, None, lambda: start)
    for i, op in enumerate(("infer", "explain", "infer")):
        record = {"endpoint_id": "m", "when": stamp(start + i), "op": op, "microsec": 5}
        part.add(orjson.dumps({**record, "request": {"inputs": [[i, 1.0]]}}), i + 1)
    (closed,) = part.close(start + 10)
    assert closed.window.requests == 3
    assert closed.window.rows == [[0, 1.0], [2, 1.0]]
