"""V2ModelServer (docs/models.md): names, parameters, loading, the hook chain, ops, logging,
files, paths."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve import Event, V2ModelServer
from mlserve.protocol.errors import IllegalOperation, InvalidInput, ModelNotReady
from tests.fixtures import (
    AsyncMultiplier,
    FailingLoad,
    GatedLoad,
    LoadFlag,
    MetricModel,
    Multiplier,
    ParamReader,
    Raising,
    Recorder,
    RecordingLogger,
    Rejecting,
    model_of,
    serve,
)

# ---- the name and its version ----


@pytest.mark.parametrize(
    ("name", "model", "version"),
    [
        ("m", "m", ""),
        ("m:v", "m", "v"),
        ("m3:v2", "m3", "v2"),
        ("m:1", "m", "1"),
        ("m:1:2", "m", "1:2"),
        ("with-dash:0.1", "with-dash", "0.1"),
        (None, "", ""),
        ("", "", ""),
    ],
)
def test_name_splits_into_name_and_version(name: str | None, model: str, version: str) -> None:
    server = V2ModelServer(name=name)
    assert (server.name, server.version) == (model, version)


def test_versioned_route_key_gives_the_model_its_version() -> None:
    server = serve({"m3:v2": (Multiplier, {"multiplier": 2})})
    model = model_of(server, "m3:v2")
    assert (model.name, model.version, model.versions) == ("m3", "v2", ["v2"])
    answer = server.test("/v2/models/m3/versions/v2/infer", body={"inputs": [1]})
    assert answer["model_name"] == "m3"
    assert answer["model_version"] == "v2"


def test_unversioned_model_has_no_model_version_in_envelope() -> None:
    answer = serve({"m": Multiplier}).test("/v2/models/m/infer", body={"inputs": [1]})
    assert "model_version" not in answer


# ---- parameters ----


def _param_server() -> mlserve.GraphServer:
    return serve(
        {"m": (ParamReader, {"own": "model", "shared": "model", "zero": 0, "none": None})},
        spec={"parameters": {"shared": "function", "fn_only": "function", "none": "function"}},
    )


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("own", "model"),  # only a model parameter
        ("shared", "model"),  # the model's parameter wins over the function's
        ("fn_only", "function"),  # only in the function's parameters
        ("missing", "default"),  # nowhere: the default
        ("zero", 0),  # falsy model values still win
        ("none", None),  # an explicit None in the model wins too
    ],
)
def test_get_param_precedence(key: str, expected: Any) -> None:
    answer = _param_server().test("/v2/models/m/infer", body={"inputs": [key]})
    assert answer["outputs"] == [expected]


def test_get_param_without_a_server_uses_the_default() -> None:
    model = V2ModelServer(name="m", alpha=1)
    assert model.get_param("alpha") == 1
    assert model.get_param("beta") is None
    assert model.get_param("beta", 5) == 5


def test_extra_kwargs_are_parameters_not_attributes() -> None:
    model = V2ModelServer(name="m", multiplier=100)
    assert model.get_param("multiplier") == 100
    assert model.to_class_args() == {"protocol": "v2", "multiplier": 100}


# ---- model= and load ----


def test_model_argument_makes_it_ready_without_load() -> None:
    before = LoadFlag.loads
    model = LoadFlag(name="m", model="given")
    assert model.ready
    model.post_init("sync")
    assert LoadFlag.loads == before
    assert model.model == "given"


def test_model_argument_through_add_model_skips_load() -> None:
    before = LoadFlag.loads
    server = serve({"m": (LoadFlag, {"model": "given"})})
    assert LoadFlag.loads == before
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == ["given"]


def test_sync_load_runs_once_at_start() -> None:
    before = LoadFlag.loads
    server = serve({"m": LoadFlag})
    assert LoadFlag.loads == before + 1
    assert model_of(server, "m").ready
    for _ in range(3):
        server.test("/v2/models/m/infer", body={"inputs": [1]})
    assert LoadFlag.loads == before + 1


def test_model_without_load_is_ready() -> None:
    model = V2ModelServer(name="plain")
    model.post_init()
    assert model.ready and model.error == ""


@pytest.mark.parametrize("load_mode", ["sync", "async"])
def test_failing_load_leaves_that_model_not_ready_while_others_serve(load_mode: str) -> None:
    server = serve(
        {"bad": FailingLoad, "good": (Multiplier, {"multiplier": 3})}, spec={"load_mode": load_mode}
    )
    bad = model_of(server, "bad")
    assert bad._loaded.wait(10) and model_of(server, "good")._loaded.wait(10)  # loads overlap
    assert not bad.ready
    assert bad.error == "OSError: disk on fire"
    failed = server.test("/v2/models/bad/infer", body={"inputs": [1]}, silent=True)
    assert failed.status_code == 503
    assert failed.body["error"].startswith("ModelNotReady: ")
    assert "disk on fire" in failed.body["error"]
    assert server.test("/v2/models/good/infer", body={"inputs": [2]})["outputs"] == [6]
    ready = server.test("/v2/models/bad/ready", method="GET", silent=True)
    assert (ready.status_code, ready.body) == (503, {"name": "bad", "ready": False})
    assert server.test("/v2/models/good/ready", method="GET") == {"name": "good", "ready": True}
    health = server.test("/v2/health/ready", method="GET", silent=True)
    assert (health.status_code, health.body) == (503, {"ready": False})


def test_async_load_answers_503_over_http_until_loaded() -> None:
    gate = GatedLoad.gate("http-503")
    server = serve(
        {"m": (GatedLoad, {"gate": "http-503", "multiplier": 4})}, spec={"load_mode": "async"}
    )
    model = model_of(server, "m")
    early = server.test("/v2/models/m/infer", body={"inputs": [1]}, silent=True)
    assert early.status_code == 503
    assert early.body == {"error": "ModelNotReady: model m is not ready yet"}
    assert server.test("/v2/models/m/ready", method="GET", silent=True).status_code == 503
    gate.set()
    assert model._loaded.wait(10)
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [4]
    assert server.test("/v2/models/m/ready", method="GET") == {"name": "m", "ready": True}


def test_async_load_makes_a_stream_event_wait_then_run() -> None:
    gate = GatedLoad.gate("stream-waits")
    server = serve(
        {"m": (GatedLoad, {"gate": "stream-waits", "multiplier": 5})}, spec={"load_mode": "async"}
    )
    answers: list[Any] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            server.test("/", body={"model": "m", "inputs": [2]}, trigger="kafka", silent=True)
        )
    )
    sender.start()
    sender.join(0.5)
    assert sender.is_alive(), f"the stream event did not wait for the load: {answers}"
    gate.set()
    sender.join(10)
    assert answers[0]["outputs"] == [10]


def test_stream_event_waits_up_to_the_configured_bound() -> None:
    GatedLoad.gate("never-opens")
    server = serve(
        {"m": (GatedLoad, {"gate": "never-opens"})},
        spec={"load_mode": "async", "parameters": {"load_wait_timeout": 0.05}},
    )
    answer = server.test("/", body={"inputs": [1]}, trigger="kafka", silent=True)
    assert answer.status_code == 503
    assert answer.body["error"] == "ModelNotReady: model m did not become ready: timeout"
    GatedLoad.gate("never-opens").set()


def test_stream_event_on_a_failed_async_load_is_503_with_the_error() -> None:
    server = serve({"m": FailingLoad}, spec={"load_mode": "async"})
    answer = server.test("/", body={"inputs": [1]}, trigger="v3ioStream", silent=True)
    assert answer.status_code == 503
    assert "disk on fire" in answer.body["error"]


# ---- the hook chain ----


def test_hooks_run_in_order_for_infer() -> None:
    server = serve({"m": Recorder})
    answer = server.test("/v2/models/m/infer", body={"inputs": [1, 2]})
    assert answer["outputs"] == [20, 30]  # preprocess adds 1, predict multiplies by 10
    assert answer["post"] is True
    assert model_of(server, "m").calls == [
        "preprocess:infer",
        "validate:infer",
        "predict",
        "postprocess",
    ]


def test_hooks_run_in_order_for_explain() -> None:
    server = serve({"m": Recorder})
    answer = server.test("/v2/models/m/explain", body={"inputs": [1]})
    assert answer["outputs"] == "because"
    assert "timestamp" not in answer
    assert model_of(server, "m").calls == [
        "preprocess:explain",
        "validate:explain",
        "explain",
        "postprocess",
    ]


@pytest.mark.parametrize("op", ["infer", "predict"])
def test_predict_op_names_reach_predict(op: str) -> None:
    server = serve({"m": Recorder})
    server.test(f"/v2/models/m/{op}", body={"inputs": [1]})
    assert model_of(server, "m").calls == [
        f"preprocess:{op}",
        f"validate:{op}",
        "predict",
        "postprocess",
    ]


def test_validate_raising_a_plain_exception_is_a_400() -> None:
    server = serve({"m": Rejecting})
    answer = server.test("/v2/models/m/infer", body={"inputs": [1, -1]}, silent=True)
    assert answer.status_code == 400
    assert answer.body == {"error": "InvalidInput: ValueError: negative inputs are not allowed"}
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [1]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"data": [1]}, 'InvalidInput: Expected key "inputs" in request body'),
        ({"inputs": 5}, 'InvalidInput: Expected "inputs" to be a list'),
        ({"inputs": "text"}, 'InvalidInput: Expected "inputs" to be a list'),
        ({"inputs": {"a": 1}}, 'InvalidInput: Expected "inputs" to be a list'),
        ([1, 2, 3], "InvalidInput: the request body must be a JSON object, got list"),
        (
            "just text",  # the parser's message, whatever the content type
            "InvalidInput: invalid JSON: unexpected character, expected a JSON value: "
            "line 1 column 1 (char 0)",
        ),
    ],
)
def test_malformed_rows_requests_are_400(body: Any, message: str) -> None:
    server = serve({"m": Multiplier})
    answer = server.test("/v2/models/m/infer", body=body, silent=True)
    assert (answer.status_code, answer.body) == (400, {"error": message})


def test_model_code_raising_is_a_500_and_the_server_keeps_serving() -> None:
    server = serve({"bad": Raising, "good": Multiplier})
    answer = server.test("/v2/models/bad/infer", body={"inputs": [1]}, silent=True)
    assert (answer.status_code, answer.body) == (500, {"error": "ValueError: model code broke"})
    assert server.test("/v2/models/good/infer", body={"inputs": [1]})["outputs"] == [1]
    assert server.test("/v2/models/bad/infer", body={"inputs": [1]}, silent=True).status_code == 500


@pytest.mark.parametrize(
    "inputs",
    [[1], [1, 2, 3], [[1, 2], [3, 4]], ["a", "b"], [{"x": 1}], [None], [1.5, -2], []],
)
def test_rows_predict_sees_inputs_exactly_as_sent(inputs: list[Any]) -> None:
    from tests.fixtures import TensorEcho

    TensorEcho.seen.clear()
    server = serve({"m": TensorEcho})
    answer = server.test("/v2/models/m/infer", body={"inputs": inputs})
    assert TensorEcho.seen[-1]["inputs"] == inputs
    assert answer["outputs"] == inputs


# ---- the envelope ----


def test_rows_envelope_fields_and_timestamp() -> None:
    before = datetime.now(UTC)
    answer = serve({"m": (Multiplier, {"multiplier": 2})}).test(
        "/v2/models/m/infer", body={"id": "req-1", "inputs": [1, 2]}
    )
    after = datetime.now(UTC)
    assert set(answer) == {"id", "model_name", "outputs", "timestamp"}
    assert answer["id"] == "req-1"
    assert answer["model_name"] == "m"
    assert answer["outputs"] == [2, 4]
    stamp = datetime.fromisoformat(answer["timestamp"])
    assert stamp.utcoffset() is not None and stamp.utcoffset().total_seconds() == 0
    assert before <= stamp <= after
    assert len(answer["timestamp"].split(".")[1].split("+")[0]) == 6  # microseconds


def test_id_echoes_the_event_id_without_a_body_id() -> None:
    server = serve({"m": Multiplier})
    answer = server.test("/v2/models/m/infer", body={"inputs": [1]}, event_id="ev-7")
    assert answer["id"] == "ev-7"
    answer = server.test(
        "/v2/models/m/infer", body={"inputs": [1], "id": "body-id"}, event_id="ev-7"
    )
    assert answer["id"] == "body-id"


def test_id_defaults_to_a_generated_event_id() -> None:
    server = serve({"m": Multiplier})
    first = server.test("/v2/models/m/infer", body={"inputs": [1]})["id"]
    second = server.test("/v2/models/m/infer", body={"inputs": [1]})["id"]
    assert first and second and first != second


def test_explain_envelope_has_no_timestamp() -> None:
    server = serve({"m": (Multiplier, {"multiplier": 3}), "v:1": Multiplier})
    answer = server.test("/v2/models/m/explain", body={"id": "e", "inputs": [1, 2]})
    assert answer == {"id": "e", "model_name": "m", "outputs": {"multiplier": 3, "count": 2}}
    answer = server.test("/v2/models/v/versions/1/explain", body={"id": "e", "inputs": [1]})
    assert answer == {
        "id": "e",
        "model_name": "v",
        "model_version": "1",
        "outputs": {"multiplier": 1, "count": 1},
    }


def test_model_without_explain_is_a_501_not_a_crash() -> None:
    answer = serve({"m": Raising}).test("/v2/models/m/explain", body={"inputs": [1]}, silent=True)
    assert answer.status_code == 501
    assert answer.body == {"error": "NotImplementedError: model m has no explain()"}


# ---- async predict ----


def test_async_predict_gives_the_same_answers() -> None:
    server = serve(
        {"sync": (Multiplier, {"multiplier": 7}), "async": (AsyncMultiplier, {"multiplier": 7})}
    )
    for inputs in ([1], [1, 2, 3], [0.5]):
        sync = server.test("/v2/models/sync/infer", body={"id": "x", "inputs": inputs})
        aio = server.test("/v2/models/async/infer", body={"id": "x", "inputs": inputs})
        assert sync["outputs"] == aio["outputs"] == [x * 7 for x in inputs]


def test_async_predict_under_concurrent_requests() -> None:
    server = serve({"m": (AsyncMultiplier, {"multiplier": 2})})
    results: dict[int, Any] = {}

    def call(i: int) -> None:
        results[i] = server.test("/v2/models/m/infer", body={"inputs": [i]})["outputs"]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == {i: [2 * i] for i in range(20)}


def test_do_event_directly_with_sync_and_async_predict() -> None:
    for cls in (Multiplier, AsyncMultiplier):
        model = cls(name="m", multiplier=3)
        model.post_init()
        event = model.do_event(Event(body={"inputs": [1, 2]}, path="/infer"))
        assert event.body["outputs"] == [3, 6]


# ---- custom operations ----


def test_custom_op_return_value_is_the_body_as_is() -> None:
    server = serve({"m": Multiplier})
    assert server.test("/v2/models/m/double", body={"inputs": [1, 2]}) == {"doubled": [2, 4]}


def test_custom_op_by_get_and_on_a_versioned_model() -> None:
    server = serve({"m:v1": Multiplier})
    assert server.test("/v2/models/m/versions/v1/info", method="GET") == ["info", "m", "v1", "GET"]
    assert server.test("/v2/models/m:v1/info", body={}) == ["info", "m", "v1", "POST"]


def test_custom_op_from_the_body_operation() -> None:
    server = serve({"a": Multiplier, "b": Multiplier})
    answer = server.test("/", body={"model": "b", "operation": "double", "inputs": [5]})
    assert answer == {"doubled": [10]}


def test_custom_op_sees_the_whole_event() -> None:
    server = serve({"m": Multiplier})
    assert server.test("/v2/models/m/echo", body={"any": ["thing"]}) == {"any": ["thing"]}


@pytest.mark.parametrize(
    ("path", "method", "op"),
    [
        ("/v2/models/m/nope", "POST", "nope"),
        ("/v2/models/m/load", "POST", "load"),
        ("/v2/models/m/a/b", "POST", "a/b"),
        ("/v2/models/m/nope", "GET", "nope"),
    ],
)
def test_illegal_operation_is_a_400_naming_it(path: str, method: str, op: str) -> None:
    answer = serve({"m": Multiplier}).test(
        path, body={"inputs": [1]} if method == "POST" else None, method=method, silent=True
    )
    assert answer.status_code == 400
    assert answer.body == {
        "error": f"IllegalOperation: illegal model operation '{op}', method={method}"
    }


def test_illegal_operation_is_an_invalid_input() -> None:
    assert issubclass(IllegalOperation, InvalidInput)
    assert IllegalOperation.status_code == 400
    assert ModelNotReady.status_code == 503


# ---- metadata ----


def test_model_metadata_by_get() -> None:
    from tests.fixtures import Declared

    server = serve({"d:1": Declared, "d:2": Declared})
    meta = server.test("/v2/models/d/versions/1", method="GET")
    assert meta == {
        "name": "d",
        "version": "1",
        "versions": ["1", "2"],
        "inputs": [
            {"name": "features", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "mask", "datatype": "BOOL", "shape": [-1]},
        ],
        "outputs": [{"name": "score", "datatype": "FP32", "shape": [-1]}],
    }


def test_platform_comes_from_the_class() -> None:
    class Platformed(Multiplier):
        platform = "numpy"

    server = serve({"p": Platformed})
    assert server.test("/v2/models/p", method="GET")["platform"] == "numpy"


# ---- metrics and logged results ----


def _logged_server(**args: Any) -> tuple[mlserve.GraphServer, RecordingLogger]:
    server = serve({"m": (MetricModel, {"multiplier": 2, **args})})
    recorder = RecordingLogger()
    model_of(server, "m").model_logger = recorder
    return server, recorder


def test_set_metric_attaches_to_the_next_record_only() -> None:
    server, recorder = _logged_server()
    server.test("/v2/models/m/infer", body={"inputs": [3, 4]})
    server.test("/v2/models/m/infer", body={"inputs": [9]})
    assert [r["metrics"] for r in recorder.records] == [
        {"batch": 2, "first": 3},
        {"batch": 1, "first": 9},
    ]
    assert model_of(server, "m").metrics == {}


def test_logged_results_replace_what_is_logged_not_what_is_answered() -> None:
    server, recorder = _logged_server()
    answer = server.test("/v2/models/m/infer", body={"id": "r1", "inputs": [3]})
    assert answer["outputs"] == [6]
    record = recorder.records[0]
    assert record["request"] == {"id": "r1", "inputs": [["logged-in"]]}
    assert record["response"] == {"outputs": [["logged-out"]]}
    assert record["op"] == "infer"
    assert record["model"] == "m"
    assert record["microsec"] >= 0


def test_logged_results_none_logs_the_real_request_and_response() -> None:
    server, recorder = _logged_server(log_real=True)
    answer = server.test("/v2/models/m/infer", body={"id": "r2", "inputs": [5]})
    record = recorder.records[0]
    assert record["request"]["inputs"] == [5]
    assert record["response"]["outputs"] == [10]
    assert record["response"]["id"] == answer["id"] == "r2"


def test_failing_predict_is_pushed_as_an_error_and_not_as_a_record() -> None:
    server = serve({"m": Raising})
    recorder = RecordingLogger()
    model_of(server, "m").model_logger = recorder
    server.test("/v2/models/m/infer", body={"inputs": [1]}, silent=True)
    assert recorder.records == []
    assert len(recorder.errors) == 1
    assert recorder.errors[0]["op"] == "infer"
    assert isinstance(recorder.errors[0]["error"], ValueError)


def test_no_model_logger_means_nothing_is_logged() -> None:
    server = serve({"m": MetricModel})
    assert model_of(server, "m").model_logger is None
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [1]


# ---- get_model ----


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    for name in ("weights.pkl", "labels.json", "a-readme.txt", "b.pkl"):
        (folder / name).write_text(name)
    (folder / "sub").mkdir()
    return folder


def test_get_model_with_a_file_path(tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    path.write_bytes(b"x")
    assert V2ModelServer(name="m", model_path=str(path)).get_model() == (str(path), {})
    assert V2ModelServer(name="m", model_path=str(path)).get_model(".pkl") == (str(path), {})


@pytest.mark.parametrize(
    ("suffix", "chosen"),
    [
        (".pkl", "b.pkl"),
        (".json", "labels.json"),
        ("weights.pkl", "weights.pkl"),
        ("", "a-readme.txt"),
    ],
)
def test_get_model_in_a_folder_takes_the_first_file_with_the_suffix(
    model_dir: Path, suffix: str, chosen: str
) -> None:
    model_file, extra = V2ModelServer(name="m", model_path=str(model_dir)).get_model(suffix)
    assert model_file == str(model_dir / chosen)
    names = {"weights.pkl", "labels.json", "a-readme.txt", "b.pkl"} - {chosen}
    assert extra == {name: str(model_dir / name) for name in names}


def test_get_model_errors(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no file ending in '.onnx'"):
        V2ModelServer(name="m", model_path=str(model_dir)).get_model(".onnx")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        V2ModelServer(name="m", model_path=str(tmp_path / "missing")).get_model()
    with pytest.raises(ValueError, match="has no model_path"):
        V2ModelServer(name="m").get_model()


def test_get_model_in_load_of_a_served_model(model_dir: Path) -> None:
    class FileModel(V2ModelServer):
        def load(self) -> None:
            model_file, extra = self.get_model(".json")
            self.model = (Path(model_file).read_text(), sorted(extra))

        def predict(self, request: dict[str, Any]) -> Any:
            return self.model

    server = serve({"f": (FileModel, {"model_path": str(model_dir)})})
    answer = server.test("/v2/models/f/infer", body={"inputs": []})
    assert answer["outputs"] == ["labels.json", ["a-readme.txt", "b.pkl", "weights.pkl"]]


# ---- input_path and result_path ----


def test_input_path_and_result_path_nested() -> None:
    server = serve(
        {"m": (Multiplier, {"multiplier": 2, "input_path": "req.data", "result_path": "resp.out"})}
    )
    body = {"req": {"data": {"inputs": [1, 2], "id": "n1"}}, "keep": 1}
    answer = server.test("/v2/models/m/infer", body=body)
    assert answer["keep"] == 1
    assert answer["req"] == {"data": {"inputs": [1, 2], "id": "n1"}}
    assert answer["resp"]["out"]["outputs"] == [2, 4]
    assert answer["resp"]["out"]["id"] == "n1"


def test_result_path_alone_keeps_the_request_beside_the_result() -> None:
    server = serve({"m": (Multiplier, {"multiplier": 3, "result_path": "prediction"})})
    answer = server.test("/v2/models/m/infer", body={"inputs": [1]})
    assert answer["inputs"] == [1]
    assert answer["prediction"]["outputs"] == [3]


def test_input_path_alone_reads_a_nested_request() -> None:
    server = serve({"m": (Multiplier, {"multiplier": 3, "input_path": "a.b.c"})})
    answer = server.test("/v2/models/m/infer", body={"a": {"b": {"c": {"inputs": [2]}}}})
    assert answer["outputs"] == [6]


def test_missing_input_path_is_a_400() -> None:
    server = serve({"m": (Multiplier, {"input_path": "req.data"})})
    answer = server.test("/v2/models/m/infer", body={"req": {}}, silent=True)
    assert answer.status_code == 400
    assert answer.body == {
        "error": "InvalidInput: input_path 'req.data' not found in the request body"
    }


def test_input_and_result_path_survive_to_class_args() -> None:
    model = Multiplier(name="m", input_path="a", result_path="b.c", multiplier=2)
    assert model.to_class_args() == {
        "protocol": "v2",
        "multiplier": 2,
        "input_path": "a",
        "result_path": "b.c",
    }


# ---- numpy in rows answers ----


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("array", [0, 1, 2]),
        ("float32", 1.5),
        ("int64", 7),
        ("bool", True),
        ("matrix", [[1.0, 1.0], [1.0, 1.0]]),
        ("nested", {"a": [1.0, 2.0], "b": [3]}),
        ("strings", ["a", "b"]),
    ],
)
def test_numpy_outputs_in_rows_form_are_serialised(kind: str, expected: Any) -> None:
    from tests.fixtures import NumpyRows

    server = serve({"m": NumpyRows})
    assert server.test("/v2/models/m/infer", body={"inputs": [kind]})["outputs"] == expected
    raw = server.test("/v2/models/m/infer", body={"inputs": [kind]}, get_body=False)
    assert raw.status_code == 200


def test_constructor_defaults() -> None:
    model = V2ModelServer()
    assert model.protocol == "v2"
    assert model.inputs == [] and model.outputs == []
    assert not model.ready
    assert model.model is None
    assert isinstance(model.context, mlserve.GraphContext)
    declared = V2ModelServer(
        name="x", inputs=[{"name": "a", "datatype": "FP32", "shape": [1]}], model=np.zeros(1)
    )
    assert declared.inputs == [{"name": "a", "datatype": "FP32", "shape": [1]}]
    assert declared.ready


def test_a_blocking_plain_predict_does_not_block_the_event_loop() -> None:
    from tests.fixtures import BlockingPredict

    server = serve({"slow": BlockingPredict, "fast": (AsyncMultiplier, {"multiplier": 2})})
    answers: list[Any] = []
    slow = threading.Thread(
        target=lambda: answers.append(server.test("/v2/models/slow/infer", body={"inputs": [1]}))
    )
    slow.start()
    try:
        # the async model answers on the loop while the plain predict blocks its worker thread
        for i in range(5):
            assert server.test("/v2/models/fast/infer", body={"inputs": [i]})["outputs"] == [2 * i]
        assert slow.is_alive() and answers == []
    finally:
        BlockingPredict.gate.set()
        slow.join(10)
    assert answers[0]["outputs"] == ["unblocked"]
