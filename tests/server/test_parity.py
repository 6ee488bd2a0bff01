"""The mock server and every network face answer alike (docs/serving.md#methods).

One table of requests goes to examples/serving.py three ways: the mock server
(``GraphServer.test``), the default HTTP face and the ASGI face under uvicorn, each
a real ``mlserve serve`` process. Status, ``Allow`` and body must be the same (an
answer's id and timestamp aside, and the ``platform`` the faces' model metadata
adds), and each row says what that answer is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

import mlserve
from mlserve import GraphServer
from mlserve.cli import load_function
from tests.netserver import ServerProcess, start_server

TARGET = "examples/serving.py"
ROW = [5.1, 3.5, 1.4, 0.2]
INFER = {"inputs": [ROW]}
TEXT_ROWS = {"inputs": [["a", "b", "c", "d"]]}
TEXT_TENSOR = {
    "inputs": [{"name": "measurements", "shape": [1, 4], "datatype": "BYTES", "data": list("abcd")}]
}
FLOAT_TENSOR = {
    "inputs": [{"name": "measurements", "shape": [1, 4], "datatype": "FP64", "data": ROW}]
}
READ, MODEL, POST = "GET, HEAD", "GET, HEAD, POST", "POST"
BAD_JSON = (
    "InvalidInput: invalid JSON: unexpected character, expected a string key: line 1 column 2"
)
DATATYPE = "InvalidInput: input 'measurements' has datatype BYTES, expected FP64"


INFER_PATH = "/v2/models/flowers/infer"
Expected = tuple[int, str | None, str | None]  # status, Allow, the error (None: any answer)
Case = tuple[str, str, Any, str | None, Expected]  # method, path, body, content type


def ok(method: str, path: str, body: Any = None) -> Case:
    return method, path, body, None, (200, None, None)


def not_allowed(method: str, path: str, allow: str, body: Any = None) -> Case:
    return (
        method,
        path,
        body,
        None,
        (405, allow, f"{method} is not allowed on {path}, only {allow}"),
    )


def refused(status: int, error: str, body: Any, content_type: str | None = None) -> Case:
    return "POST", INFER_PATH, body, content_type, (status, None, error)


CASES = [
    ok("POST", INFER_PATH, INFER),
    ok("POST", "/v2/models/flowers/versions/v2/infer", FLOAT_TENSOR),
    ok("POST", "/", {"model": "flowers:v2", **INFER}),
    ok("POST", "/v2/models/flowers", INFER),
    ok("GET", "/"),
    ok("GET", "/v2/models/"),
    ok("GET", "/v2/models/flowers/versions/v2"),
    ok("GET", "/v2/models/flowers/ready"),
    ok("GET", "/v2/models/flowers/config"),
    ok("GET", "/v2/models/flowers/classes"),  # a model's own operation
    ok("POST", "/v2/models/flowers/classes", {}),
    ok("GET", "/v1/models/flowers/versions/v2"),
    ok("POST", "/v2/repository/index"),
    not_allowed("PUT", INFER_PATH, POST, INFER),
    not_allowed("GET", INFER_PATH, POST),
    not_allowed("OPTIONS", "/v2/models/flowers/explain", POST),
    not_allowed("GET", "/v2/models/nope/infer/", POST),
    not_allowed("GET", "/v2/repository/index", POST),
    not_allowed("DELETE", "/", MODEL, INFER),
    not_allowed("PUT", "/", MODEL, INFER),
    not_allowed("PATCH", "/", MODEL, INFER),
    not_allowed("TRACE", "/", MODEL),
    not_allowed("DELETE", "/v2/models/flowers", MODEL, INFER),
    not_allowed("PUT", "/v2/models/flowers", MODEL, INFER),
    not_allowed("PATCH", "/v2/models/flowers/versions/v2", MODEL, INFER),
    not_allowed("TRACE", "/v2/models/flowers", MODEL),
    not_allowed("DELETE", "/v2/models/flowers/classes", MODEL),
    not_allowed("POST", "/v2/health/ready", READ),
    not_allowed("POST", "/v2/models", READ, INFER),
    not_allowed("POST", "/v2/models/flowers/ready", READ, {}),
    not_allowed("POST", "/v2/models/flowers/config", READ, {}),
    not_allowed("DELETE", "/metrics", READ),
    not_allowed("PUT", "/v1/models/flowers:predict", POST, {"instances": [ROW]}),
    not_allowed("POST", "/v1/models/flowers", READ, {}),
    (
        "POST",
        "/v2/models/nope/infer",
        INFER,
        None,
        (404, None, "Request for unknown model: 'nope' is not found (ModelNotFound)"),
    ),
    refused(400, DATATYPE, TEXT_ROWS),
    refused(400, DATATYPE, TEXT_TENSOR),
    refused(400, BAD_JSON, b"{bad"),
    refused(400, BAD_JSON, b"{bad", "text/plain"),
    refused(400, BAD_JSON, b"{bad", "application/x-www-form-urlencoded"),  # curl -d
    refused(400, BAD_JSON, b"{bad", "application/json"),
    refused(
        400, "InvalidInput: the request body must be a JSON object, got list", b"[1]", "text/plain"
    ),
]


@pytest.fixture(scope="module")
def mock() -> GraphServer:
    server: GraphServer = load_function(TARGET).to_mock_server()
    return server


@pytest.fixture(scope="module")
def faces() -> Iterator[dict[str, ServerProcess]]:
    lean = start_server(target=TARGET)
    try:
        asgi = start_server("--http", "asgi", target=TARGET)
    except BaseException:
        lean.stop()
        raise
    yield {"mlserve": lean, "asgi": asgi}
    asgi.stop()
    lean.stop()


def _answer(status: int, allow: str | None, body: bytes) -> tuple[int, str | None, Any]:
    """What a client compares: the status, ``Allow``, and the body without its id and time."""
    parsed = json.loads(body)
    if isinstance(parsed, dict):
        parsed = {key: value for key, value in parsed.items() if key not in ("id", "timestamp")}
    return status, allow, parsed


def _mock(mock: GraphServer, method: str, path: str, body: Any, content_type: str | None) -> Any:
    response = mock.test(
        path, body, method=method, content_type=content_type, silent=True, get_body=False
    )
    return _answer(response.status_code, response.headers.get("Allow"), response.body)


def _network(url: str, method: str, path: str, body: Any, content_type: str | None) -> Any:
    content = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"content-type": content_type} if content_type else {}
    reply = httpx.request(method, url + path, content=content, headers=headers, timeout=30)
    return _answer(reply.status_code, reply.headers.get("allow"), reply.content)


@pytest.mark.parametrize(("method", "path", "body", "content_type", "expected"), CASES)
def test_the_mock_and_the_faces_answer_alike(
    mock: GraphServer,
    faces: dict[str, ServerProcess],
    method: str,
    path: str,
    body: Any,
    content_type: str | None,
    expected: Expected,
) -> None:
    in_process = _mock(mock, method, path, body, content_type)
    status, allow, error = expected
    assert in_process[:2] == (status, allow), in_process
    if error is not None:
        assert in_process[2]["error"].startswith(error), in_process
    for name, face in faces.items():
        network = _network(face.url, method, path, body, content_type)
        if isinstance(network[2], dict) and "platform" not in (in_process[2] or {}):
            # model metadata: the faces add the OIP's required platform, mlrun's mock has none
            network = (*network[:2], {k: v for k, v in network[2].items() if k != "platform"})
        assert network == in_process, name


@pytest.mark.parametrize(
    ("path", "status", "allow"),
    [("/v2/health/live", 200, None), ("/v2/models/flowers", 200, None), (INFER_PATH, 405, POST)],
)
def test_head_is_answered_as_get_alike(
    mock: GraphServer,
    faces: dict[str, ServerProcess],
    path: str,
    status: int,
    allow: str | None,
) -> None:
    """HEAD goes wherever GET does (the network sends no body back)."""
    response = mock.test(path, method="HEAD", silent=True, get_body=False)
    assert (response.status_code, response.headers.get("Allow")) == (status, allow)
    for name, face in faces.items():
        reply = httpx.head(face.url + path, timeout=30)
        assert (reply.status_code, reply.headers.get("allow"), reply.content) == (
            status,
            allow,
            b"",
        ), name


def test_grpc_refuses_a_wrong_datatype_as_rest_does(
    mock: GraphServer, faces: dict[str, ServerProcess]
) -> None:
    request = service_pb2.ModelInferRequest(model_name="flowers")
    tensor = request.inputs.add(name="measurements", datatype="BYTES", shape=[1, 4])
    tensor.contents.bytes_contents.extend([b"a", b"b", b"c", b"d"])
    channel = grpc.insecure_channel(faces["mlserve"].grpc_address)
    with channel, pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        info.value.details()
        == _mock(mock, "POST", "/v2/models/flowers/infer", TEXT_TENSOR, None)[2]["error"]
    )


def test_invoke_of_a_mock_deployment_refuses_a_method_as_the_network_does() -> None:
    fn = load_function(TARGET)
    mlserve.deploy_function(fn, mock=True)
    with pytest.raises(mlserve.ServingRequestError) as info:
        fn.invoke(INFER_PATH, INFER, method="PUT")
    assert info.value.status_code == 405
    assert info.value.body == {"error": "PUT is not allowed on /v2/models/flowers/infer, only POST"}
    assert fn.invoke("/v2/models/flowers/classes", method="GET") == [
        "setosa",
        "versicolor",
        "virginica",
    ]
