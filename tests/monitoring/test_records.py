"""The model-log records (docs/monitoring.md#records), read from the in-memory stream."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve.graph.routers import BaseModelRouter
from mlserve.monitoring.records import BATCH_HEADERS, plain_tensors
from mlserve.monitoring.streams.memory import get_stream
from tests.monitoring.conftest import (
    FailingModel,
    HiddenModel,
    SlowModel,
    SumModel,
    unique,
    wait_for,
)

BASE = {"class", "worker", "model", "version", "host", "function_uri"}
ROWS = {"inputs": [[1, 2], [3, 4]]}


def records_of(server: Any, name: str) -> list[dict[str, Any]]:
    server.wait_for_completion()
    return get_stream(name).records


def test_single_record_has_exactly_the_fields_of_s8(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", {"m1:v2": SumModel})
    response = server.test("/v2/models/m1/versions/v2/infer", ROWS)
    (record,) = records_of(server, name)
    assert set(record) == BASE | {"request", "op", "resp", "when", "microsec"}
    assert record["class"] == "SumModel"
    assert (record["model"], record["version"], record["worker"]) == ("m1", "v2", 0)
    assert record["function_uri"] == "proj/fn"
    assert record["request"]["inputs"] == [[1, 2], [3, 4]]
    assert record["resp"] == response
    assert record["op"] == "infer"
    assert record["when"] == response["timestamp"]
    assert isinstance(record["microsec"], int) and record["microsec"] > 0


def test_labels_and_metrics_appear_when_set(make_server: Any) -> None:
    name = unique()
    fn = mlserve.new_function("fn", project="proj")
    fn.add_model("m1", class_name=SumModel, labels={"team": "a"}, metric=True)
    fn.set_tracking(f"dummy://{name}")
    server = fn.to_mock_server()
    try:
        server.test("/v2/models/m1/infer", ROWS)
    finally:
        server.wait_for_completion()
    (record,) = get_stream(name).records
    assert record["labels"] == {"team": "a"}
    assert record["metrics"] == {"rows": 2}


def test_tensor_requests_are_logged_as_plain_lists(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}")
    tensor = {"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}
    server.test("/v2/models/m1/infer", {"inputs": [tensor]})
    binary = {"inputs": [tensor], "parameters": {"binary_data_output": True}}
    server.test("/v2/models/m1/infer", binary)
    first, second = records_of(server, name)
    for record in (first, second):
        assert record["request"]["inputs"] == [[1.0, 2.0], [3.0, 4.0]]
        assert record["resp"]["outputs"] == [3.0, 7.0]


def test_several_tensors_are_a_list_of_lists(make_server: Any) -> None:
    class TwoInputs(SumModel):
        def predict(self, request: dict[str, Any]) -> Any:
            inputs = request["inputs"]
            return {"a": inputs["x"] * 2, "b": np.int64(5)}

    name = unique()
    server = make_server(f"dummy://{name}", {"m1": TwoInputs})
    x = {"name": "x", "shape": [2], "datatype": "INT64", "data": [1, 2]}
    y = {"name": "y", "shape": [1], "datatype": "BYTES", "data": ["hi"]}
    server.test("/v2/models/m1/infer", {"inputs": [x, y]})
    (record,) = records_of(server, name)
    assert record["request"]["inputs"] == [[1, 2], ["hi"]]
    assert record["resp"]["outputs"] == [[2, 4], 5]


def test_numpy_in_rows_results_is_serialised(tmp_path: Any, make_server: Any) -> None:
    path = tmp_path / "logs.jsonl"
    server = make_server(str(path))
    server.test("/v2/models/m1/infer", {"inputs": [[1.5, 2.5]]})
    server.wait_for_completion()
    (line,) = path.read_text().splitlines()
    record = mlserve.protocol.tensors.loads(line)
    assert record["resp"]["outputs"] == [4.0]


def test_every_sample_th_success_is_logged_and_errors_always(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", {"m1": SumModel, "bad": FailingModel}, sample=3)
    for _ in range(7):
        server.test("/v2/models/m1/infer", ROWS)
    for _ in range(2):
        server.test("/v2/models/bad/infer", ROWS, silent=True)
    records = records_of(server, name)
    assert [r["model"] for r in records if "error" not in r] == ["m1", "m1"]
    errors = [r for r in records if "error" in r]
    assert len(errors) == 2


def test_error_record_is_sent_at_once(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", {"bad": FailingModel}, batch=50, sample=10)
    answer = server.test("/v2/models/bad/infer", ROWS, silent=True)
    assert answer.status_code == 500
    wait_for(lambda: get_stream(name).records)
    (record,) = get_stream(name).records
    assert set(record) == BASE | {"request", "op", "when", "error"}
    assert record["error"] == "no luck"  # str(exc), as mlrun writes it
    assert record["request"]["inputs"] == [[1, 2], [3, 4]]
    assert len(record["request"]["id"]) == 32  # the event's id names the failed request


def test_batch_of_n_is_one_record_with_headers_and_values(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", batch=3, stream_args={"flush_after": 60})
    answers = [server.test("/v2/models/m1/infer", {"inputs": [[i]]}) for i in range(3)]
    wait_for(lambda: get_stream(name).records)
    (record,) = get_stream(name).records
    assert set(record) == BASE | {"headers", "values"}
    assert record["headers"] == BATCH_HEADERS
    assert len(record["values"]) == 3
    for i, (row, answer) in enumerate(zip(record["values"], answers, strict=True)):
        request, op, resp, when, microsec, metrics = row
        assert request["inputs"] == [[i]] and op == "infer" and resp == answer
        assert when == answer["timestamp"] and microsec > 0 and metrics == {}


def test_partial_batch_is_flushed_after_the_time_limit(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", batch=10, stream_args={"flush_after": 0.2})
    server.test("/v2/models/m1/infer", ROWS)
    server.test("/v2/models/m1/infer", ROWS)
    wait_for(lambda: get_stream(name).records, timeout=10)
    (record,) = get_stream(name).records
    assert len(record["values"]) == 2


def test_partial_batch_is_flushed_at_shutdown(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", batch=10, stream_args={"flush_after": 600})
    server.test("/v2/models/m1/infer", ROWS)
    time.sleep(0.2)
    assert get_stream(name).records == []
    (record,) = records_of(server, name)
    assert len(record["values"]) == 1


def test_logged_results_replace_inputs_and_outputs(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", {"m1": HiddenModel})
    server.test("/v2/models/m1/infer", ROWS)
    (record,) = records_of(server, name)
    assert record["request"]["inputs"] == [["hidden"]]
    assert record["resp"] == {"outputs": ["secret"]}


def test_microsec_is_the_total_latency_beyond_one_second(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", {"slow": SlowModel})
    server.test("/v2/models/slow/infer", ROWS)
    (record,) = records_of(server, name)
    assert record["microsec"] >= 1_100_000


class LoggingEnsemble(BaseModelRouter):
    """A router that logs its own record, as an ensemble does."""

    async def route_event(self, event: Any, path: str, run: Any) -> Any:
        start = datetime.now(UTC)
        body = event.body
        outputs = []
        for route in self.routes.values():
            event.body = dict(body)
            outputs.append((await run(route, event)).body["outputs"])
        response = {"model_name": self.name, "outputs": np.mean(outputs, axis=0)}
        if self.model_logger is not None:
            self.model_logger.push(self, start, body, response, "infer", 10, None)
        event.body = response
        return event

    model_logger: Any = None


def test_an_ensemble_logs_its_own_record_besides_its_children(make_server: Any) -> None:
    name = unique()
    fn = mlserve.new_function("fn", project="proj")
    fn.set_topology("router", LoggingEnsemble, name="ens")
    fn.add_model("a", class_name=SumModel)
    fn.add_model("b", class_name=SumModel)
    fn.set_tracking(f"dummy://{name}")
    server = fn.to_mock_server()
    try:
        server.test("/", ROWS)
    finally:
        server.wait_for_completion()
    records = get_stream(name).records
    assert sorted(r["model"] for r in records) == ["a", "b", "ens"]
    (own,) = [r for r in records if r["class"] == "LoggingEnsemble"]
    assert own["resp"]["outputs"] == [3.0, 7.0]


def test_mock_server_streams_with_set_tracking_whatever_track_models(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}", track_models=False)
    server.test("/v2/models/m1/infer", ROWS)
    assert len(records_of(server, name)) == 1
    missing = server.test("/api/v1/projects/proj/model-endpoints", silent=True)
    assert missing.status_code == 404


def test_track_models_alone_in_the_mock_server_keeps_endpoint_records_only() -> None:
    fn = mlserve.new_function("fn", project=unique("p"))
    fn.add_model("m1", class_name=SumModel)
    server = fn.to_mock_server(track_models=True)
    try:
        server.test("/v2/models/m1/infer", ROWS)
        endpoints = server.test(f"/api/v1/projects/{fn.metadata.project}/model-endpoints")
        (endpoint,) = endpoints["endpoints"]
        assert endpoint["spec"]["monitoring_mode"] == "disabled"
        assert server.iter_models().__next__().model_logger.pusher is None
    finally:
        server.wait_for_completion()


@pytest.mark.parametrize("shape", [[], [4], [1, 4], [2, 2], [2, 1, 2], [0, 3]])
def test_output_tensors_nest_as_numpy_would(shape: list[int]) -> None:
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    tensor = {"name": "o", "datatype": "INT64", "shape": shape, "data": values.ravel().tolist()}
    assert plain_tensors([tensor]) == values.tolist()
