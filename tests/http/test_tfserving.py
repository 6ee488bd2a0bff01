"""TF Serving's REST API (/v1): status, metadata, predict in row and columnar forms, b64, labels."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import uvicorn

import mlserve
from mlserve import V2ModelServer
from mlserve.frameworks.tensorflow import TFModelServer
from mlserve.http.app import create_app
from tests.services import free_port
from tests.tf_models import TFModels, tf_models

X = (np.arange(8, dtype=np.float32).reshape(2, 4) / 10).tolist()


class Labels:
    """The repository's label lookup, as the /v1 handler asks for it."""

    def resolve_label(self, model: str, label: str) -> str | None:
        return {("strings", "stable"): "1"}.get((model, label))


class Echo(V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> TFModels:
    return tf_models(tmp_path_factory)


@pytest.fixture(scope="module")
def server(models: TFModels) -> mlserve.GraphServer:
    fn = mlserve.new_function("v1")
    fn.add_model("mlp:1", model_path=str(models.mlp / "1"), class_name=TFModelServer)
    fn.add_model("mlp:2", model_path=str(models.mlp), class_name=TFModelServer)
    fn.add_model("strings:1", model_path=str(models.module), class_name=TFModelServer)
    fn.add_model(
        "echo",
        class_name=Echo,
        inputs=[{"name": "v", "datatype": "INT64", "shape": [-1]}],
        outputs=[{"name": "w", "datatype": "INT64", "shape": [-1]}],
    )
    server = fn.to_mock_server()
    server.repository = Labels()
    return server


def test_status_of_all_versions_and_one(server) -> None:
    available = {"state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    assert server.test("/v1/models/mlp") == {
        "model_version_status": [{"version": "1", **available}, {"version": "2", **available}]
    }
    assert server.test("/v1/models/mlp/versions/2")["model_version_status"] == [
        {"version": "2", **available}
    ]
    assert (
        server.test("/v1/models/strings/labels/stable")["model_version_status"][0]["version"] == "1"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/nope",
        "/v1/models/mlp/versions/9",
        "/v1/models/strings/labels/canary",
        "/v1/models/mlp/versions/9:predict",
    ],
)
def test_unknown_model_version_or_label_is_404(server, path: str) -> None:
    response = server.test(
        path, {"instances": X} if path.endswith(":predict") else None, silent=True
    )
    assert response.status_code == 404 and "error" in response.body


def test_metadata_shows_signature_defs(server) -> None:
    meta = server.test("/v1/models/strings/metadata")
    assert meta["model_spec"] == {"name": "strings", "signature_name": "", "version": "1"}
    defs = meta["metadata"]["signature_def"]["signature_def"]
    assert sorted(defs) == ["concat", "serving_default"]
    x = defs["serving_default"]["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "2"]
    assert defs["concat"]["outputs"]["output"]["dtype"] == "DT_STRING"
    assert defs["serving_default"]["method_name"] == "tensorflow/serving/predict"


def test_metadata_of_a_plain_model_from_its_declared_tensors(server) -> None:
    defs = server.test("/v1/models/echo/metadata")["metadata"]["signature_def"]["signature_def"]
    assert defs["serving_default"]["inputs"]["v"]["dtype"] == "DT_INT64"


def test_row_and_columnar_predict(server, models: TFModels) -> None:
    expected = models.mlp_expected(np.asarray(X, np.float32))
    rows = server.test("/v1/models/mlp:predict", {"instances": X})["predictions"]
    columns = server.test("/v1/models/mlp/versions/1:predict", {"inputs": X})["outputs"]
    np.testing.assert_allclose(rows, expected, rtol=1e-5)
    np.testing.assert_allclose(columns, expected, rtol=1e-5)


def test_several_outputs(server) -> None:
    rows = server.test("/v1/models/strings:predict", {"instances": [[1, 2], [3, 4]]})
    assert rows == {
        "predictions": [{"total": 3.0, "y": [2.0, 4.0]}, {"total": 7.0, "y": [6.0, 8.0]}]
    }
    columns = server.test("/v1/models/strings/labels/stable:predict", {"inputs": {"x": [[1, 2]]}})
    assert columns == {"outputs": {"total": [3.0], "y": [[2.0, 4.0]]}}


def test_strings_with_b64_and_signature_name(server) -> None:
    hello = base64.b64encode(b"hello ").decode()
    body = {
        "signature_name": "concat",
        "instances": [{"a": {"b64": hello}, "b": "world"}, {"a": {"b64": "/w=="}, "b": "x"}],
    }
    predictions = server.test("/v1/models/strings:predict", body)["predictions"]
    assert predictions == ["hello world", {"b64": base64.b64encode(b"\xffx").decode()}]
    body = {"signature_name": "concat", "inputs": {"a": ["p", "q"], "b": ["1", "2"]}}
    assert server.test("/v1/models/strings:predict", body) == {"outputs": ["p1", "q2"]}


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        ("mlp", {"instances": [[1, 2, 3]]}, "Expected [-1,4], got [1,3]"),
        ("mlp", {"rows": X}, '"instances" (row form) or "inputs"'),
        (
            "strings",
            {"instances": [{"a": "x"}, {"b": "y"}], "signature_name": "concat"},
            "instance 1 has inputs",
        ),
        ("strings", {"instances": [{"b64": "@@"}], "signature_name": "concat"}, "bad base64"),
        ("mlp", {"instances": X, "signature_name": "nope"}, "signature 'nope' not found"),
        ("strings", {"instances": [[1, 2], [3]]}, "inhomogeneous"),
        ("mlp", {"instances": X, "inputs": X}, "only one of"),
        ("mlp", {"instances": [{"nope": row} for row in X]}, "unknown input 'nope'"),
        ("strings", {"inputs": {"z": [[1, 2]]}}, "unknown input 'z'"),
    ],
)
def test_bad_requests_are_400(server, model: str, body: dict, message: str) -> None:
    response = server.test(f"/v1/models/{model}:predict", body, silent=True)
    assert response.status_code == 400 and message in response.body["error"]


def test_classify_is_not_supported(server) -> None:
    response = server.test("/v1/models/mlp:classify", {"examples": []}, silent=True)
    assert response.status_code == 501


def test_plain_model_predicts(server) -> None:
    assert server.test("/v1/models/echo:predict", {"instances": [1, 2]}) == {"predictions": [1, 2]}


@pytest.fixture(scope="module")
def url(server) -> Iterator[str]:
    port = free_port()
    http = uvicorn.Server(
        uvicorn.Config(
            create_app(server), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
    )
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not http.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    http.should_exit = True
    thread.join(10)


def test_over_http(url: str, models: TFModels) -> None:
    with httpx.Client(base_url=url) as client:
        status = client.get("/v1/models/mlp/versions/1")
        assert (
            status.status_code == 200
            and status.json()["model_version_status"][0]["state"] == "AVAILABLE"
        )
        answer = client.post("/v1/models/mlp:predict", json={"instances": X})
        assert answer.status_code == 200
        np.testing.assert_allclose(
            answer.json()["predictions"], models.mlp_expected(np.asarray(X, np.float32)), rtol=1e-5
        )
        body = {"signature_name": "concat", "instances": [{"a": {"b64": "YQ=="}, "b": "b"}]}
        assert client.post("/v1/models/strings:predict", json=body).json() == {
            "predictions": ["ab"]
        }
        bad = client.post("/v1/models/mlp:predict", content=b"{not json")
        assert bad.status_code == 400 and "error" in bad.json()
        assert client.get("/v1/models/nope").status_code == 404
