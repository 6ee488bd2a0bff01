"""The function object (docs/notebooks.md): building, class names, round-trips, and
`mlserve serve` over HTTP."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import mlserve
from mlserve.graph.steps import RouterStep, TaskStep
from tests.fixtures import Multiplier, TensorSum
from tests.services import free_port, wait_for_port

ROOT = Path(__file__).parent.parent
TESTDATA = Path(__file__).parent / "testdata"
CODE_FILE = TESTDATA / "serving_code.py"

# ---- new_function and code_to_function ----


def test_new_function_metadata() -> None:
    fn = mlserve.new_function("f", project="p", tag="t")
    assert (fn.metadata.name, fn.metadata.project, fn.metadata.tag) == ("f", "p", "t")
    assert fn.kind == "serving"
    assert fn.uri == "p/f:t"
    assert mlserve.new_function("g").uri == "default/g"
    assert fn.spec.graph is None
    assert fn.spec.parameters == {}


def test_only_serving_functions() -> None:
    with pytest.raises(ValueError, match="only kind='serving'"):
        mlserve.new_function("f", kind="job")
    with pytest.raises(ValueError, match="only kind='serving'"):
        mlserve.code_to_function("f", filename=str(CODE_FILE), kind="nuclio")


def test_code_to_function_namespace_resolves_class_names() -> None:
    fn = mlserve.code_to_function("code", filename=str(CODE_FILE), project="p")
    assert {"Scaler", "Doubler", "serving_function"} <= set(fn.namespace)
    assert fn.spec.source == CODE_FILE.read_text()
    fn.add_model("s", class_name="Scaler", scale=3)
    server = fn.to_mock_server()
    assert server.test("/v2/models/s/infer", body={"inputs": [1, 2]})["outputs"] == [3, 6]


def test_code_to_function_name_defaults_to_the_file_stem() -> None:
    assert mlserve.code_to_function(filename=str(CODE_FILE)).metadata.name == "serving_code"


# ---- class_name forms ----


class Local(Multiplier):
    """A class of the test module: found by name in the caller's globals."""


@pytest.mark.parametrize(
    "class_name",
    [
        "Local",  # a name in the caller's namespace
        "tests.fixtures.Multiplier",  # a dotted import
        Multiplier,  # a class
        Local,
    ],
)
def test_class_name_forms(class_name: Any) -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m", class_name=class_name, multiplier=100)
    server = fn.to_mock_server()
    assert server.test("/v2/models/m/infer", body={"inputs": [5]})["outputs"] == [500]


def test_class_name_as_an_instance() -> None:
    fn = mlserve.new_function("f")
    instance = Multiplier(multiplier=4)
    fn.add_model("m", class_name=instance)
    server = fn.to_mock_server()
    assert server.test("/v2/models/m/infer", body={"inputs": [5]})["outputs"] == [20]
    assert server.graph.routes["m"].object is instance
    assert instance.name == "m"
    assert server.test("/v2/models/m/ready") == {"name": "m", "ready": True}
    route = fn.spec.graph.to_dict()["routes"]["m"]
    assert route["class_name"] == "tests.fixtures.Multiplier"
    assert route["class_args"]["multiplier"] == 4


def test_class_name_in_an_explicit_namespace() -> None:
    class Hidden(Multiplier):
        pass

    fn = mlserve.new_function("f")
    fn.add_model("m", class_name="Hidden", multiplier=2)
    server = fn.to_mock_server(namespace={"Hidden": Hidden})
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [2]


def test_unknown_class_name_is_a_clear_error() -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m", class_name="NoSuchClass")
    with pytest.raises(ValueError, match="'NoSuchClass' is not in the namespace"):
        fn.to_mock_server()
    fn = mlserve.new_function("f")
    fn.add_model("m", class_name="no.such.Module")
    with pytest.raises(ValueError, match="cannot import 'no.such.Module'"):
        fn.to_mock_server()


# ---- add_model and set_topology ----


def test_add_model_creates_a_router() -> None:
    fn = mlserve.new_function("f")
    route = fn.add_model("m:1", model_path="/tmp/x", class_name=Multiplier, multiplier=3)
    assert isinstance(fn.spec.graph, RouterStep)
    assert isinstance(route, TaskStep)
    assert list(fn.spec.graph.routes) == ["m:1"]
    assert route.class_args == {"multiplier": 3, "model_path": "/tmp/x", "protocol": "v2"}


def test_add_model_to_an_existing_router_keeps_its_class() -> None:
    fn = mlserve.new_function("f")
    fn.set_topology("router", class_name="ModelRouter", url_prefix="/v2/models")
    fn.add_model("a", class_name=Multiplier)
    fn.add_model("b", class_name=Multiplier)
    assert fn.spec.graph.class_name == "ModelRouter"
    assert list(fn.spec.graph.routes) == ["a", "b"]


def test_add_model_replaces_a_route_with_the_same_key() -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m", class_name=Multiplier, multiplier=2)
    fn.add_model("m", class_name=Multiplier, multiplier=9)
    server = fn.to_mock_server()
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [9]


def test_add_model_errors() -> None:
    fn = mlserve.new_function("f")
    with pytest.raises(ValueError, match="needs a class_name"):
        fn.add_model("m")
    with pytest.raises(ValueError, match="model_path or model_url, not both"):
        fn.add_model("m", model_path="a", model_url="http://b", class_name=Multiplier)


def test_set_topology() -> None:
    fn = mlserve.new_function("f")
    with pytest.raises(ValueError, match="unknown topology 'star'"):
        fn.set_topology("star")
    first = fn.set_topology("router")
    assert fn.set_topology("router", exist_ok=True) is first
    with pytest.raises(ValueError, match="already has a graph.*exist_ok=True"):
        fn.set_topology("router")
    assert fn.spec.graph is first


def test_set_topology_after_add_model_keeps_the_models() -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m1", model_path=".", class_name=Multiplier)
    with pytest.raises(ValueError, match="already has a graph"):
        fn.set_topology("router", class_name="VotingEnsemble")
    assert list(fn.set_topology("router", exist_ok=True).routes) == ["m1"]


def test_the_mock_server_is_independent_of_the_function() -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m", class_name=Multiplier, multiplier=2)
    first = fn.to_mock_server()
    fn.add_model("n", class_name=Multiplier)
    second = fn.to_mock_server()
    assert first.test("/v2/models") == {"models": ["m"]}
    assert second.test("/v2/models") == {"models": ["m", "n"]}


# ---- round-trips ----


def _whole_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("whole", project="proj", tag="v3")
    fn.add_model("m", class_name=Multiplier, multiplier=2, input_path="req", result_path="res")
    fn.add_model("m:2", class_name="tests.fixtures.Multiplier", multiplier=5)
    fn.add_model("inst", class_name=Multiplier(multiplier=7))
    fn.add_model("sum", class_name=TensorSum)
    fn.spec.parameters = {"greeting": "hi", "load_wait_timeout": 5}
    fn.spec.load_mode = "sync"
    fn.spec.default_content_type = "application/json"
    return fn


REQUESTS: list[tuple[str, Any]] = [
    ("/v2/models", None),
    ("/v2/models/m/versions/2", None),
    ("/v2/models/m:2/infer", {"id": "1", "inputs": [1, 2]}),
    ("/v2/models/m/infer", {"req": {"id": "2", "inputs": [3]}}),
    ("/v2/models/inst/explain", {"id": "3", "inputs": [1]}),
    (
        "/v2/models/sum/infer",
        {"id": "4", "inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]},
    ),
    ("/", {"model": "m:2", "operation": "double", "inputs": [4]}),
    ("/v2/models/nope/infer", {"inputs": [1]}),
    ("/v2/models/m:2/infer", '{"inputs": [1]'),
]


def _answers(server: mlserve.GraphServer) -> list[tuple[int, Any]]:
    answers = []
    for path, body in REQUESTS:
        response = server.test(path, body=body, silent=True, get_body=False)
        decoded = json.loads(response.body)
        for envelope in (decoded, decoded.get("res") if isinstance(decoded, dict) else None):
            if isinstance(envelope, dict):
                envelope.pop("timestamp", None)
        answers.append((response.status_code, decoded))
    return answers


def test_to_dict_from_dict_round_trip() -> None:
    fn = _whole_function()
    struct = fn.to_dict()
    again = mlserve.ServingFunction.from_dict(struct)
    assert again.to_dict() == struct
    assert struct["kind"] == "serving"
    assert struct["metadata"] == {"name": "whole", "project": "proj", "tag": "v3"}
    assert struct["spec"]["parameters"] == {"greeting": "hi", "load_wait_timeout": 5}
    routes = struct["spec"]["graph"]["routes"]
    assert list(routes) == ["m", "m:2", "inst", "sum"]
    assert routes["m"]["class_args"] == {
        "multiplier": 2,
        "input_path": "req",
        "result_path": "res",
        "protocol": "v2",
    }
    assert all(route["class_args"]["protocol"] == "v2" for route in routes.values())
    assert _answers(again.to_mock_server()) == _answers(fn.to_mock_server())


def test_to_yaml_round_trip() -> None:
    fn = _whole_function()
    again = mlserve.ServingFunction.from_dict(yaml.safe_load(fn.to_yaml()))
    assert again.to_dict() == fn.to_dict()
    assert _answers(again.to_mock_server()) == _answers(fn.to_mock_server())


@pytest.mark.parametrize("name", ["fn.yaml", "fn.yml", "fn.json"])
def test_export_import_function_round_trip(tmp_path: Path, name: str) -> None:
    fn = _whole_function()
    path = fn.export(str(tmp_path / name))
    assert path == str(tmp_path / name)
    text = Path(path).read_text()
    assert (json.loads(text) if name.endswith(".json") else yaml.safe_load(text)) == fn.to_dict()
    again = mlserve.import_function(path)
    assert again.to_dict() == fn.to_dict()
    assert _answers(again.to_mock_server()) == _answers(fn.to_mock_server())


def test_export_defaults_to_a_file_named_after_the_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _whole_function().export() == "function-whole.yaml"
    assert mlserve.import_function("function-whole.yaml").metadata.name == "whole"


def test_code_function_round_trip_carries_its_source(tmp_path: Path) -> None:
    fn = mlserve.code_to_function("code", filename=str(CODE_FILE))
    fn.add_model("s", class_name="Scaler", scale=6)
    fn.spec.parameters = {"greeting": "yo"}
    path = fn.export(str(tmp_path / "code.yaml"))
    again = mlserve.import_function(path)
    assert again.spec.source == CODE_FILE.read_text()
    server = again.to_mock_server(namespace={})
    assert server.test("/v2/models/s/infer", body={"inputs": [2]})["outputs"] == [12]
    assert server.test("/v2/models/s/explain", body={"inputs": [2]})["outputs"] == {
        "scale": 6,
        "greeting": "yo",
    }


def test_round_trip_of_settings() -> None:
    fn = mlserve.new_function("s")
    fn.add_model("m", class_name=Multiplier)
    fn.spec.load_mode = "async"
    fn.spec.default_content_type = "application/json"
    fn.set_tracking(stream_path="file:///tmp/x.jsonl", batch=4)
    again = mlserve.ServingFunction.from_dict(fn.to_dict())
    assert again.spec.load_mode == "async"
    assert again.spec.default_content_type == "application/json"
    assert again.spec.track_models is True
    assert again.spec.tracking == {
        "enable_tracking": True,
        "stream_path": "file:///tmp/x.jsonl",
        "batch": 4,
    }


# ---- `mlserve serve` over real HTTP, against the mock server ----


def _start(target: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlserve",
            "serve",
            target,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=30, proc=proc)
    except Exception:
        proc.kill()
        proc.wait()
        raise
    return proc, port


@pytest.fixture(scope="module", params=["py", "yaml"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, mlserve.GraphServer]]:
    """A real `mlserve serve` process and the mock server of the same function."""
    from tests.testdata.serving_code import serving_function

    fn = serving_function()
    if request.param == "py":
        target = str(CODE_FILE)
    else:
        target = fn.export(str(tmp_path_factory.mktemp("export") / "function.yaml"))
    proc, port = _start(target)
    try:
        yield port, fn.to_mock_server()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


HTTP_CASES: list[tuple[str, str, bytes | None, str]] = [
    ("GET", "/", None, ""),
    ("GET", "/v2", None, ""),
    ("GET", "/v2/health", None, ""),
    ("GET", "/v2/health/live", None, ""),
    ("GET", "/v2/health/ready", None, ""),
    ("GET", "/v2/models", None, ""),
    ("GET", "/v2/models/", None, ""),
    ("GET", "/v2/models/scaler", None, ""),
    ("GET", "/v2/models/scaler/versions/2", None, ""),
    ("GET", "/v2/models/doubler", None, ""),
    ("GET", "/v2/models/scaler/ready", None, ""),
    ("GET", "/v2/models/scaler/versions/2/ready", None, ""),
    ("POST", "/v2/models/scaler/infer", b'{"id": "a", "inputs": [1, 2]}', "application/json"),
    ("POST", "/v2/models/scaler/predict", b'{"id": "b", "inputs": [[1], [2]]}', ""),
    ("POST", "/v2/models/scaler", b'{"id": "c", "inputs": [3]}', "application/json"),
    ("POST", "/v2/models/scaler/versions/2/infer", b'{"id": "d", "inputs": [1]}', ""),
    ("POST", "/v2/models/scaler:2/explain", b'{"id": "e", "inputs": [1]}', ""),
    ("POST", "/v2/models/scaler/describe", b"{}", "application/json"),
    ("POST", "/", b'{"id": "f", "model": "scaler:2", "inputs": [2]}', ""),
    ("POST", "/", b'{"id": "g", "inputs": [2]}', ""),
    (
        "POST",
        "/v2/models/doubler/infer",
        b'{"id": "h", "inputs": [{"name": "x", "shape": [2, 2], "datatype": "INT32", '
        b'"data": [1, 2, 3, 4]}]}',
        "application/json",
    ),
    (
        "POST",
        "/v2/models/doubler/infer",
        b'{"id": "i", "inputs": [{"name": "x", "shape": [3], "datatype": "INT32", '
        b'"data": [1, 2]}]}',
        "application/json",
    ),
    ("POST", "/v2/models/nope/infer", b'{"inputs": [1]}', "application/json"),
    (
        "POST",
        "/v2/models/scaler/infer",
        b'{"id": "j", "inputs": [7]}',
        "application/x-www-form-urlencoded",
    ),  # what `curl -d` sends
    ("POST", "/v2/models/scaler/infer", b"image bytes", "image/png"),
    ("GET", "/nowhere", None, ""),
    ("POST", "/v2/models/scaler/infer", b'{"inputs": [1', "application/json"),
    ("POST", "/v2/models/scaler/infer", b'{"nothing": 1}', "application/json"),
    ("POST", "/v2/models/scaler/nope", b'{"inputs": [1]}', "application/json"),
    ("POST", "/v2/models/scaler/infer", b"[1, 2]", "application/json"),
]


def _http(
    port: int, method: str, path: str, body: bytes | None, content_type: str
) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("content-type") or "", response.read()
    finally:
        conn.close()


def _comparable(body: bytes) -> Any:
    decoded = json.loads(body)
    if isinstance(decoded, dict):
        decoded.pop("timestamp", None)
        if len(str(decoded.get("id", ""))) == 32:  # a generated event id differs per event
            decoded["id"] = "generated"
    return decoded


@pytest.mark.parametrize(("method", "path", "body", "content_type"), HTTP_CASES)
def test_http_and_mock_server_give_the_same_answers(
    served: tuple[int, mlserve.GraphServer],
    method: str,
    path: str,
    body: bytes | None,
    content_type: str,
) -> None:
    port, mock = served
    status, http_type, http_body = _http(port, method, path, body, content_type)
    expected = mock.test(
        path,
        body=body,
        method=method,
        content_type=content_type or None,
        silent=True,
        get_body=False,
        trigger="http",  # as the face: model metadata with the protocol's platform
    )
    assert status == expected.status_code
    assert http_type == expected.content_type
    assert _comparable(http_body) == _comparable(expected.body)


def test_http_answers_are_the_documented_ones(served: tuple[int, mlserve.GraphServer]) -> None:
    port, _ = served
    status, _, body = _http(
        port, "POST", "/v2/models/scaler/infer", b'{"id": "z", "inputs": [1, 2]}', ""
    )
    assert status == 200
    answer = json.loads(body)
    assert (answer["id"], answer["model_name"], answer["outputs"]) == ("z", "scaler", [10, 20])
    status, _, body = _http(port, "GET", "/v2/health/ready", None, "")
    assert (status, json.loads(body)) == (200, {"ready": True})
    status, _, body = _http(port, "POST", "/v2/models/nope/infer", b'{"inputs": [1]}', "")
    assert status == 404
    assert json.loads(body)["error"].startswith(
        "Request for unknown model: 'nope' is not found (ModelNotFound)"
    )
