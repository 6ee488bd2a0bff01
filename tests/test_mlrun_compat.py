"""mlrun's serving tests, ported by changing imports, plus malformed requests
checked through ``server.test()`` and a real ``mlserve serve`` alike."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import mlserve as mlrun
from mlserve import GraphServer
from mlserve.protocol.tensors import dumps
from tests.http.mlrun_fn import EnsembleModelTestingClass, ModelTestingClass, serving_function
from tests.netserver import ServerProcess, start_server

testdata = '{"inputs": [5]}'
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\.\d{6}\+00:00$")


@pytest.fixture(scope="module")
def server() -> GraphServer:
    return serving_function().to_mock_server()


@pytest.fixture(scope="module")
def http() -> Iterator[ServerProcess]:
    proc = start_server(target="tests/http/mlrun_fn.py")
    yield proc
    proc.stop()


def routes(model_class: Any) -> dict[str, mlrun.TaskStep]:
    return {
        "m1": mlrun.TaskStep(model_class, class_args={"model_path": "", "multiplier": 100}),
        "m2": mlrun.TaskStep(model_class, class_args={"model_path": "", "multiplier": 200}),
        "m3:v1": mlrun.TaskStep(model_class, class_args={"model_path": "", "multiplier": 300}),
        "m3:v2": mlrun.TaskStep(model_class, class_args={"model_path": "", "multiplier": 400}),
    }


# ---- mlrun's tests/serving/test_serving.py ---------------------------------------


def test_v2_get_models(server: GraphServer) -> None:
    assert server.test("/v2/models/", method="GET") == {
        "models": ["m1", "m2", "m3:v1", "m3:v2", "echo"]
    }


@pytest.mark.parametrize(
    ("url", "expected"),
    [("m1", 500), ("m2", 1000), ("m3/versions/v1", 1500), ("m3/versions/v2", 2000)],
)
def test_v2_infer(server: GraphServer, url: str, expected: int) -> None:
    resp = server.test(f"/v2/models/{url}/infer", testdata)
    assert resp["outputs"] == expected
    assert TIMESTAMP.match(resp["timestamp"])


def test_versioned_answers_carry_model_version(server: GraphServer) -> None:
    resp = server.test("/v2/models/m3/versions/v1/infer", testdata)
    assert (resp["model_name"], resp["model_version"]) == ("m3", "v1")
    assert "model_version" not in server.test("/v2/models/m1/infer", testdata)


def test_ensemble_get_models_and_infer() -> None:
    fn = mlrun.new_function("tests", kind="serving")
    graph = fn.set_topology(
        "router",
        mlrun.VotingEnsemble(vote_type="regression", prediction_col_name="predictions"),
    )
    graph.routes = routes(EnsembleModelTestingClass)
    server = fn.to_mock_server()
    assert len(server.test("/v2/models/", method="GET")["models"]) == 5
    for url, expected in [("m1", 500), ("m3/versions/v2", 2000), ("VotingEnsemble", 1250.0)]:
        resp = server.test(f"/v2/models/{url}/infer", testdata)
        assert resp["outputs"] == {"predictions": [expected]}
    assert server.test("/v2/models/infer", testdata)["outputs"] == {"predictions": [1250.0]}
    for url in ("/v2/models/VotingEnsemble/ready", "/v2/models/m3/versions/v1/ready"):
        assert server.test(url, method="GET")["ready"] is True


def test_v2_stream_mode(server: GraphServer) -> None:
    assert server.test("/", '{"model": "m2", "inputs": [5]}')["outputs"] == 1000
    resp = server.test("/", '{"model": "m3:v2", "operation": "explain", "inputs": [5]}')
    assert resp["outputs"] == {"explained": 5}
    assert "timestamp" not in resp


def test_v2_raised_err_is_a_500_and_others_keep_serving() -> None:
    class RaiserTestingClass(mlrun.V2ModelServer):
        def predict(self, request: Any) -> Any:
            raise ValueError("simulated error..")

    fn = mlrun.new_function("tests")
    fn.add_model("m6", ".", class_name=RaiserTestingClass)
    fn.add_model("m1", ".", class_name=ModelTestingClass, multiplier=1)
    server = fn.to_mock_server()
    resp = server.test("/v2/models/m6/infer", testdata, silent=True)
    assert (resp.status_code, resp.body) == (500, {"error": "ValueError: simulated error.."})
    assert server.test("/v2/models/m1/infer", testdata)["outputs"] == 5


def test_v2_explain(server: GraphServer) -> None:
    resp = server.test("/v2/models/m1/explain", testdata)
    assert resp["outputs"] == {"explained": 5}


@pytest.mark.parametrize(
    ("url", "name", "version"),
    [("m2", "m2", ""), ("m3/versions/v2", "m3", "v2"), ("m3", "m3", "v2")],
)
def test_v2_get_modelmeta(server: GraphServer, url: str, name: str, version: str) -> None:
    resp = server.test(f"/v2/models/{url}", method="GET")
    assert (resp["name"], resp["version"]) == (name, version)


def test_v2_custom_handler(server: GraphServer) -> None:
    assert server.test("/v2/models/m1/myop", '{"test": "ok"}') == {"test": "ok"}


def test_v2_errors(server: GraphServer) -> None:
    resp = server.test("/v2/models/m1/xx", '{"test": "ok"}', silent=True)
    assert resp.status_code == 400 and "xx" in resp.body["error"]
    with pytest.raises(RuntimeError) as info:
        server.test("/v2/models/m5/xx", '{"test": "ok"}')
    assert "404" in str(info.value) and "m5" in str(info.value)


def test_v2_model_ready(server: GraphServer) -> None:
    assert server.test("/v2/models/m1/ready", method="GET") == {"name": "m1", "ready": True}
    assert server.test("/v2/models/m3/versions/v1/ready", method="GET") == {
        "name": "m3",
        "ready": True,
    }


def test_v2_health(server: GraphServer) -> None:
    assert server.test("/", method="GET")["version"] == "v2"
    assert server.test("/v2/health", method="GET")["version"] == "v2"


def test_v2_mock() -> None:
    host = mlrun.create_graph_server(graph=mlrun.RouterStep())
    host.graph.add_route("my", class_name=ModelTestingClass, model_path="", multiplier=100)
    host.init_states(None, namespace=globals())
    host.init_object(globals())
    assert host.test("/v2/models/my/infer", testdata)["outputs"] == 500


def test_function_with_an_instance() -> None:
    fn = mlrun.new_function("tests", kind="serving")
    fn.set_topology("router")
    fn.add_model("my", ".", class_name=ModelTestingClass(multiplier=100))
    assert fn.to_mock_server().test("/v2/models/my/infer", testdata)["outputs"] == 500


def test_serving_no_router() -> None:
    fn = mlrun.new_function("tests", kind="serving")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(ModelTestingClass, "my2", model_path=".", multiplier=100).respond()
    server = fn.to_mock_server()
    assert server.test("/", method="GET")["name"] == "my2"
    assert server.test("/", testdata)["outputs"] == 500


# ---- the same answer from server.test() and a real server -------------------------

T = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}

MALFORMED: list[tuple[str, str, Any, str | None, int]] = [
    ("POST", "/v2/models/m1/infer", b"[1, 2]", None, 400),
    ("POST", "/v2/models/m1/infer", b'"text"', None, 400),
    ("POST", "/v2/models/m1/infer", b"5", None, 400),
    ("POST", "/v2/models/m1/infer", b"null", None, 400),
    ("POST", "/v2/models/m1/infer", b"", None, 400),
    ("POST", "/v2/models/m1/infer", b"{bad", None, 400),
    ("POST", "/v2/models/m1/infer", b"{bad", "application/json", 400),
    ("POST", "/v2/models/m1/infer", b"[" * 5000 + b"]" * 5000, None, 400),
    ("POST", "/v2/models/m1/infer", b"hello", "text/plain", 400),
    ("POST", "/v2/models/m1/infer", b"a=1&b=2", "application/x-www-form-urlencoded", 400),
    ("POST", "/v2/models/m1/infer", {"inputs": 5}, None, 400),
    ("POST", "/v2/models/m1/infer", {"inputs": None}, None, 400),
    ("POST", "/v2/models/m1/infer", {}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "data": [1, 2, 3]}]}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "datatype": "NOPE"}]}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "shape": "2"}]}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "data": ["a", "b"]}]}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "datatype": "BF16"}]}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "datatype": "BOOL"}]}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [T], "parameters": 5}, None, 400),
    ("POST", "/v2/models/echo/infer", {"inputs": [T], "parameters": [1]}, None, 400),
    (
        "POST",
        "/v2/models/echo/infer",
        {"inputs": [T], "outputs": [{"name": "output-0", "parameters": 5}]},
        None,
        400,
    ),
    ("POST", "/v2/models/echo/infer", {"inputs": [T], "outputs": [{"name": "y"}]}, None, 400),
    ("POST", "/v2/models/m3/versions/v9/infer", {"inputs": [5]}, None, 404),
    ("GET", "/v2/models/m3/versions/v9/ready", None, None, 404),
    ("POST", "/v2/models/m1/xx", {"inputs": [5]}, None, 400),
    ("POST", "/", {"model": "nope", "inputs": [5]}, None, 404),
    ("GET", "/nope", None, None, 404),
    ("GET", "/v2/models/%2e%2e/ready", None, None, 400),
    ("GET", "/v2/models/m1%2Fx/ready", None, None, 400),
    ("GET", "/v2/models/m1/explain", None, None, 405),  # POST only, in-process too
]

GOOD: list[tuple[str, str, Any, str | None]] = [
    ("GET", "/v2/models/m1/ready/", None, None),
    ("GET", "/v2/models/m3/versions/v2/ready?verbose=1", None, None),
    ("GET", "/v2/models?x=1", None, None),
    ("POST", "/v2/models/m1/infer/", {"inputs": [5]}, None),
    ("POST", "/v2/models/m1/infer?x=1", {"inputs": [5], "id": "abc"}, None),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "datatype": "FP16"}]}, None),
    (
        "POST",
        "/v2/models/echo/infer",
        {"inputs": [{**T, "datatype": "BYTES", "data": ["a", "b"]}]},
        None,
    ),
    ("POST", "/v2/models/echo/infer", {"inputs": [{**T, "shape": [], "data": [1.5]}]}, None),
    ("POST", "/v2/models/echo/infer", b"\x89PNG\r\n", "image/png"),
]


def both(
    server: GraphServer, http: ServerProcess, method: str, path: str, body: Any, ctype: str | None
) -> tuple[tuple[int, Any], tuple[int, Any]]:
    raw = body if body is None or isinstance(body, bytes) else dumps(body)
    headers = {"content-type": ctype} if ctype else {}
    answer = httpx.request(method, http.url + path, content=raw, headers=headers, timeout=30)
    mock = server.test(path, body=raw, method=method, content_type=ctype, silent=True)
    mock_pair = (mock.status_code, mock.body) if isinstance(mock, mlrun.Response) else (200, mock)
    return (answer.status_code, answer.json()), mock_pair


def _same(answer: Any) -> Any:
    if isinstance(answer, dict):
        return {k: v for k, v in answer.items() if k not in ("id", "timestamp")}
    return answer


@pytest.mark.parametrize(("method", "path", "body", "ctype", "status"), MALFORMED)
def test_bad_input_is_the_same_4xx_through_both_faces(
    server: GraphServer,
    http: ServerProcess,
    method: str,
    path: str,
    body: Any,
    ctype: str | None,
    status: int,
) -> None:
    answer, mock = both(server, http, method, path, body, ctype)
    assert answer == mock
    assert answer[0] == status
    error = answer[1]["error"]
    if error.endswith("(ModelNotFound)"):  # Triton's words first: docs/protocol.md#errors
        error = "ModelNotFound: " + error
    assert set(answer[1]) == {"error"} and error.split(":")[0] in (
        f"{method} is not allowed on {path}, only POST",
        "InvalidInput",
        "ModelNotFound",
        "IllegalOperation",
    )
    assert both(server, http, "POST", "/v2/models/m2/infer", {"inputs": [1]}, None)[0][0] == 200


@pytest.mark.parametrize(("method", "path", "body", "ctype"), GOOD)
def test_good_input_is_the_same_200_through_both_faces(
    server: GraphServer, http: ServerProcess, method: str, path: str, body: Any, ctype: str | None
) -> None:
    answer, mock = both(server, http, method, path, body, ctype)
    assert answer[0] == mock[0] == 200
    assert _same(answer[1]) == _same(mock[1])


def test_a_missing_body_is_named_plainly(server: GraphServer) -> None:
    resp = server.test("/v2/models/m1/infer", body=b"", silent=True)
    assert resp.body == {
        "error": "InvalidInput: the request body must be a JSON object, got an empty body"
    }


def test_percent_encoded_model_names_route(server: GraphServer, http: ServerProcess) -> None:
    answer, mock = both(server, http, "GET", "/v2/models/m3%3Av1/ready", None, None)
    assert answer == mock == (200, {"name": "m3", "ready": True})


def test_body_id_is_echoed_through_both_faces(server: GraphServer, http: ServerProcess) -> None:
    body = {"inputs": [T], "id": "my-id"}
    answer, mock = both(server, http, "POST", "/v2/models/echo/infer", body, None)
    assert answer[1]["id"] == mock[1]["id"] == "my-id"


def test_ensemble_is_not_ready_while_a_voter_failed_to_load() -> None:
    class Broken(EnsembleModelTestingClass):
        def load(self) -> None:
            raise RuntimeError("no weights")

    fn = mlrun.new_function("tests", kind="serving")
    fn.set_topology("router", mlrun.VotingEnsemble(prediction_col_name="predictions"))
    fn.add_model("a", ".", class_name=EnsembleModelTestingClass, multiplier=1)
    fn.add_model("b", ".", class_name=Broken, multiplier=3)
    server = fn.to_mock_server()
    resp = server.test("/v2/models/VotingEnsemble/ready", method="GET", silent=True)
    assert (resp.status_code, resp.body) == (503, {"name": "VotingEnsemble", "ready": False})
    assert server.test("/v2/models/a/ready", method="GET") == {"name": "a", "ready": True}
