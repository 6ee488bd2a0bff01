"""``--log-format json``, ``--access-log`` and ``x-request-id``, read from a real
``mlserve serve`` process: every line of its log is a JSON object, a line written
while a request is answered names the request and its model, the access log has one
line per request and none for probes, and the request id is the V2 ``id`` or a
generated one, on both HTTP faces and gRPC."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

# tritonclient's stubs of the same protocol: the other tests load them, and one process's
# descriptor pool holds only one of theirs and mlserve's (tests/grpc/convert_checks.py)
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from tests.netserver import ServerProcess, start_server

FN = "tests/tracing/logs_fn.py"
GENERATED = re.compile(r"[0-9a-f]{32}")


def _served(log: Path, *args: str) -> Iterator[ServerProcess]:
    with log.open("wb") as out:
        server = start_server(*args, target=FN, stderr=out)
        try:
            yield server
        finally:
            server.stop()


def _infer_request(request_id: str = "") -> pb.ModelInferRequest:
    tensor = pb.ModelInferRequest.InferInputTensor(
        name="x", datatype="INT64", shape=[1], contents=pb.InferTensorContents(int64_contents=[4])
    )
    return pb.ModelInferRequest(model_name="loud", id=request_id, inputs=[tensor])


@pytest.fixture(scope="module")
def json_log(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[list[Any], dict[str, Any]]]:
    """The JSON log of a server that answered the requests below, and what they saw."""
    log = tmp_path_factory.mktemp("logs") / "stderr.log"
    seen: dict[str, Any] = {}
    for server in _served(log, "--log-format", "json", "--access-log"):
        url = server.url + "/v2/models"
        named = httpx.post(f"{url}/loud/infer", json={"id": "req-1", "inputs": [1, 2]})
        seen["named"] = named.headers["x-request-id"], named.json()
        unnamed = httpx.post(f"{url}/loud/infer", json={"inputs": [1]})
        seen["unnamed"] = unnamed.headers["x-request-id"], unnamed.json()
        broken = httpx.post(f"{url}/broken/infer", json={"inputs": [1]})
        seen["broken"] = broken.status_code, broken.headers["x-request-id"]
        assert httpx.get(server.url + "/v2/health/ready").status_code == 200
        with grpc.insecure_channel(server.grpc_address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            _, call = stub.ModelInfer.with_call(_infer_request("grpc-1"))
            seen["grpc"] = dict(call.trailing_metadata())
            answer, call = stub.ModelInfer.with_call(_infer_request())
            seen["grpc-unnamed"] = dict(call.trailing_metadata()), answer.id
            stub.ServerReady(pb.ServerReadyRequest())
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    yield lines, seen


def test_every_line_is_a_json_object_with_the_fields(json_log: Any) -> None:
    lines, _ = json_log
    assert lines
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])
    assert any(line["message"] == "loading model loud" for line in lines)


def test_a_line_written_during_a_request_names_it(json_log: Any) -> None:
    lines, seen = json_log
    said = [line for line in lines if line["logger"] == "tests.loud"]
    generated = seen["unnamed"][0]
    assert [(line["request_id"], line["model"]) for line in said] == [
        ("req-1", "loud"),
        (generated, "loud"),
        ("grpc-1", "loud"),
        (seen["grpc-unnamed"][1], "loud"),
    ]
    assert [line["message"] for line in said[:2]] == ["predicting 2 rows", "predicting 1 rows"]
    failed = [line for line in lines if line["level"] == "error"]
    assert len(failed) == 1
    assert failed[0]["request_id"] == seen["broken"][1]
    assert failed[0]["model"] == "broken"
    assert "the model broke" in failed[0]["message"]


def test_the_request_id_is_the_v2_id_or_generated(json_log: Any) -> None:
    _, seen = json_log
    header, body = seen["named"]
    assert header == body["id"] == "req-1"
    header, body = seen["unnamed"]
    assert GENERATED.fullmatch(header) and body["id"] == header
    status, header = seen["broken"]
    assert status == 500 and GENERATED.fullmatch(header)
    assert seen["grpc"]["x-request-id"] == "grpc-1"
    metadata, answer_id = seen["grpc-unnamed"]
    assert GENERATED.fullmatch(metadata["x-request-id"]) and answer_id == metadata["x-request-id"]


def test_the_access_log_has_one_line_per_request_and_no_probe(json_log: Any) -> None:
    lines, seen = json_log
    access = [line for line in lines if line["logger"] == "mlserve.access"]
    assert [(line["method"], line["path"], line["status"]) for line in access] == [
        ("POST", "/v2/models/loud/infer", 200),
        ("POST", "/v2/models/loud/infer", 200),
        ("POST", "/v2/models/broken/infer", 500),
        ("POST", "/inference.GRPCInferenceService/ModelInfer", 0),
        ("POST", "/inference.GRPCInferenceService/ModelInfer", 0),
    ]
    ids = [line["request_id"] for line in access]
    assert ids[:3] == ["req-1", seen["unnamed"][0], seen["broken"][1]]
    assert ids[3] == "grpc-1"
    for line in access:
        assert line["model"] in ("loud", "broken")
        assert line["duration_ms"] >= 0
        assert line["bytes"] > 0
        assert "127.0.0.1" in line["client"]
        assert "trace_id" not in line  # tracing is off


def test_text_logs_and_the_asgi_face(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    for server in _served(log, "--http", "asgi", "--access-log"):
        answer = httpx.post(
            server.url + "/v2/models/loud/infer", json={"id": "asgi-1", "inputs": [3]}
        )
        assert answer.headers["x-request-id"] == "asgi-1"
        plain = httpx.post(server.url + "/v2/models/loud/infer", json={"inputs": [3]})
        assert GENERATED.fullmatch(plain.headers["x-request-id"])
        assert plain.json()["id"] == plain.headers["x-request-id"]
        assert httpx.get(server.url + "/v2/health/live").status_code == 200
    text = log.read_text()
    access = [line for line in text.splitlines() if " mlserve.access: " in line]
    assert len(access) == 2, text
    assert re.search(
        r'127\.0\.0\.1 - "POST /v2/models/loud/infer" 200 \d+B [\d.]+ms id=asgi-1$', access[0]
    )
    assert not text.lstrip().startswith("{")


def test_no_access_log_unless_asked(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    for server in _served(log):
        answer = httpx.post(server.url + "/v2/models/loud/infer", json={"id": "q", "inputs": [1]})
        assert answer.headers["x-request-id"] == "q"
        for unfit in ("a\r\nset-cookie: stolen=1", "x" * 129):  # never a header of its own
            answer = httpx.post(
                server.url + "/v2/models/loud/infer", json={"id": unfit, "inputs": [1]}
            )
            assert answer.status_code == 200
            assert GENERATED.fullmatch(answer.headers["x-request-id"])
            assert "set-cookie" not in answer.headers
    assert "mlserve.access" not in log.read_text()
