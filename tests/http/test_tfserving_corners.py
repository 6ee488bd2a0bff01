"""TF Serving REST corners, as TF Serving's json_tensor.cc answers them: bytes
outputs (``*_bytes`` and non-UTF-8 as ``{"b64"}``, trailing NULs kept), NaN and
Infinity read and written, a scalar ``instances``, and shape mismatches as 400s
with a readable message. Checked in-process and over a real ``mlserve serve``."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mlserve
from mlserve.frameworks.tensorflow import TFModelServer
from tests.netserver import ServerProcess, start_server

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _save(path: Path) -> None:
    import tensorflow as tf

    class Corners(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def double(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": x * 2.0}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="a")])
        def strings(self, a: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"out_bytes": a, "text": a}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="a")])
        def one_bytes(self, a: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"out_bytes": a}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="m")])
        def matmul(self, m: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"product": tf.matmul(m, tf.ones([2, 3]))}

    module = Corners()
    signatures = {
        "serving_default": module.double,
        "strings": module.strings,
        "one_bytes": module.one_bytes,
        "matmul": module.matmul,
    }
    tf.saved_model.save(module, str(path), signatures=signatures)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tf-corners") / "corners" / "1"
    _save(path)
    return path


@pytest.fixture(scope="module")
def server(model_path: Path) -> mlserve.GraphServer:
    fn = mlserve.new_function("tf-corners")
    fn.add_model("corners", model_path=str(model_path), class_name=TFModelServer)
    return fn.to_mock_server()


def _predict(server: mlserve.GraphServer, body: Any) -> tuple[int, Any]:
    """Status and parsed JSON answer (NaN and Infinity read as Python floats)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = server.test("/v1/models/corners:predict", data, silent=True)
    status, answer = getattr(response, "status_code", 200), getattr(response, "body", response)
    if isinstance(answer, bytes):
        answer = json.loads(answer)
    return status, answer


def _b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode()}


def test_row_form_bytes_outputs_are_b64_objects(server: mlserve.GraphServer) -> None:
    body = {"signature_name": "strings", "instances": ["hi", _b64(b"\xff\x00"), "nul\x00"]}
    status, answer = _predict(server, body)
    assert status == 200
    assert answer["predictions"] == [
        {"out_bytes": _b64(b"hi"), "text": "hi"},
        {"out_bytes": _b64(b"\xff\x00"), "text": _b64(b"\xff\x00")},
        {"out_bytes": _b64(b"nul\x00"), "text": "nul\x00"},
    ]
    status, answer = _predict(server, {**body, "signature_name": "one_bytes"})
    assert answer["predictions"] == [_b64(b"hi"), _b64(b"\xff\x00"), _b64(b"nul\x00")]


def test_columnar_bytes_outputs(server: mlserve.GraphServer) -> None:
    body = {"signature_name": "strings", "inputs": {"a": ["x\x00\x00", _b64(b"\x80")]}}
    status, answer = _predict(server, body)
    assert status == 200
    assert answer["outputs"] == {
        "out_bytes": [_b64(b"x\x00\x00"), _b64(b"\x80")],
        "text": ["x\x00\x00", _b64(b"\x80")],
    }


@pytest.mark.parametrize("key", ["instances", "inputs"])
def test_nan_and_infinity_in_and_out(server: mlserve.GraphServer, key: str) -> None:
    status, answer = _predict(server, f'{{"{key}": [[NaN, Infinity], [-Infinity, 1.5]]}}'.encode())
    assert status == 200
    rows = answer["predictions" if key == "instances" else "outputs"]
    assert str(rows) == "[[nan, inf], [-inf, 3.0]]"


def test_scalar_instances_is_one_instance(server: mlserve.GraphServer) -> None:
    status, answer = _predict(server, {"signature_name": "one_bytes", "instances": "a"})
    assert (status, answer) == (200, {"predictions": [_b64(b"a")]})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"instances": [[1.0, 2.0, 3.0]]},
            "unexpected shape for input 'x' for model 'corners'. Expected [-1,2], got [1,3]",
        ),
        (
            {"inputs": [1.0, 2.0]},
            "unexpected shape for input 'x' for model 'corners'. Expected [-1,2], got [2]",
        ),
        (
            {"signature_name": "matmul", "instances": [[1.0, 2.0, 3.0]]},
            "Matrix size-incompatible: In[0]: [1,3], In[1]: [2,3]",
        ),
        ({"instances": [["a", "b"]]}, "input 'x'"),
        (b'{"instances": [[NaN, 1.0]', "invalid JSON"),
    ],
)
def test_shape_mismatch_is_a_readable_400(
    server: mlserve.GraphServer, body: Any, message: str
) -> None:
    status, answer = _predict(server, body)
    assert status == 400 and message in answer["error"]
    for internal in ("Graph execution", "node", "Op:", "Traceback", "tensorflow"):
        assert internal not in answer["error"]


@pytest.fixture(scope="module")
def net(model_path: Path) -> Iterator[ServerProcess]:
    os.environ["MLSERVE_TEST_TF_MODEL"] = str(model_path)
    try:
        server = start_server(target="tests/http/tf_corners_fn.py")
    finally:
        del os.environ["MLSERVE_TEST_TF_MODEL"]
    yield server
    server.stop()


def test_over_http(net: ServerProcess) -> None:
    with httpx.Client(base_url=net.url, timeout=30) as client:
        url = "/v1/models/corners:predict"
        nan = client.post(url, content=b'{"instances": [[NaN, -Infinity]]}')
        assert nan.status_code == 200 and nan.headers["content-type"].startswith("application/json")
        assert nan.text.replace(" ", "") == '{"predictions":[[NaN,-Infinity]]}'
        body = {"signature_name": "strings", "instances": [_b64(b"\xfe\x00")]}
        assert client.post(url, json=body).json() == {
            "predictions": [{"out_bytes": _b64(b"\xfe\x00"), "text": _b64(b"\xfe\x00")}]
        }
        bad = client.post(url, json={"signature_name": "matmul", "instances": [[1.0, 2.0, 3.0]]})
        assert bad.status_code == 400 and "Matrix size-incompatible" in bad.json()["error"]
