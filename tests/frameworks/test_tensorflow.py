"""TFModelServer: SavedModels from Keras and tf.Module, both request forms, signatures, strings."""

from __future__ import annotations

import numpy as np
import pytest

import mlserve
from mlserve.frameworks.tensorflow import TFModelServer, resolve_saved_model
from tests.tf_models import TFModels, tf_models


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> TFModels:
    return tf_models(tmp_path_factory)


@pytest.fixture(scope="module")
def server(models: TFModels) -> mlserve.GraphServer:
    fn = mlserve.new_function("tf")
    fn.add_model("mlp", model_path=str(models.mlp), class_name=TFModelServer)
    fn.add_model("strings:1", model_path=str(models.module / "1"), class_name=TFModelServer)
    return fn.to_mock_server()


X = np.arange(8, dtype=np.float32).reshape(2, 4) / 10


def test_base_folder_serves_highest_version(models: TFModels, tmp_path) -> None:
    assert resolve_saved_model(models.mlp) == models.mlp / "1"
    (tmp_path / "7").mkdir()
    with pytest.raises(FileNotFoundError):
        resolve_saved_model(tmp_path)


def test_keras_metadata(server) -> None:
    meta = server.test("/v2/models/mlp")
    assert meta["platform"] == "tensorflow_savedmodel"
    assert meta["inputs"] == [{"name": "inputs", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "output_0", "datatype": "FP32", "shape": [-1, 3]}]


def test_keras_tensor_form(server, models: TFModels) -> None:
    body = {
        "inputs": [{"name": "any", "datatype": "FP32", "shape": [2, 4], "data": X.ravel().tolist()}]
    }
    answer = server.test("/v2/models/mlp/infer", body)
    (out,) = answer["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("output_0", "FP32", [2, 3])
    np.testing.assert_allclose(np.reshape(out["data"], (2, 3)), models.mlp_expected(X), rtol=1e-5)


def test_keras_rows_form(server, models: TFModels) -> None:
    answer = server.test("/v2/models/mlp/infer", {"inputs": X.tolist()})
    np.testing.assert_allclose(answer["outputs"], models.mlp_expected(X), rtol=1e-5)


def test_wrong_shape_is_400(server) -> None:
    body = {"inputs": [{"name": "inputs", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
    response = server.test("/v2/models/mlp/infer", body, silent=True)
    assert response.status_code == 400
    assert "for model 'mlp'. Expected [-1,4], got [1,3]" in response.body["error"]


def test_module_metadata_and_outputs(server) -> None:
    meta = server.test("/v2/models/strings/versions/1")
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}]
    assert {o["name"]: o["shape"] for o in meta["outputs"]} == {"y": [-1, 2], "total": [-1]}
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}]}
    outputs = {o["name"]: o for o in server.test("/v2/models/strings/infer", body)["outputs"]}
    assert outputs["y"]["data"] == [2, 4, 6, 8] and outputs["total"]["data"] == [3, 7]
    rows = server.test("/v2/models/strings/infer", {"inputs": [[1, 2], [3, 4]]})["outputs"]
    assert rows == {"y": [[2, 4], [6, 8]], "total": [3, 7]}


def test_requested_outputs(server) -> None:
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
        "outputs": [{"name": "total"}],
    }
    assert [o["name"] for o in server.test("/v2/models/strings/infer", body)["outputs"]] == [
        "total"
    ]


def _concat_body(where: str) -> dict:
    body = {
        "inputs": [
            {"name": "a", "datatype": "BYTES", "shape": [2], "data": ["hello ", "ab"]},
            {"name": "b", "datatype": "BYTES", "shape": [2], "data": ["world", "cd"]},
        ]
    }
    if where == "parameters":
        body["parameters"] = {"signature_name": "concat"}
    else:
        body["signature_name"] = "concat"
    return body


@pytest.mark.parametrize("where", ["parameters", "top"])
def test_string_signature_by_name(server, where: str) -> None:
    (out,) = server.test("/v2/models/strings/infer", _concat_body(where))["outputs"]
    assert (out["name"], out["datatype"], out["data"]) == (
        "output",
        "BYTES",
        ["hello world", "abcd"],
    )


def test_string_signature_rows_of_dicts(server) -> None:
    body = {"inputs": [{"a": "x", "b": "1"}, {"a": "y", "b": "2"}], "signature_name": "concat"}
    assert server.test("/v2/models/strings/infer", body)["outputs"] == ["x1", "y2"]


def test_unknown_signature_and_missing_input_are_400(server) -> None:
    body = _concat_body("parameters")
    body["parameters"]["signature_name"] = "nope"
    response = server.test("/v2/models/strings/infer", body, silent=True)
    assert response.status_code == 400 and "signature 'nope' not found" in response.body["error"]
    body = _concat_body("parameters")
    body["inputs"] = body["inputs"][:1]
    response = server.test("/v2/models/strings/infer", body, silent=True)
    assert response.status_code == 400 and "missing input 'b'" in response.body["error"]


def test_a_layout_that_passed_is_still_checked_per_signature_and_dtype(server) -> None:
    body = _concat_body("parameters")
    for _ in range(2):  # the second one finds its layout remembered
        (out,) = server.test("/v2/models/strings/infer", body)["outputs"]
        assert out["data"] == ["hello world", "abcd"]
    body["parameters"] = {}  # the same tensors, to the default signature (x: FP32 [-1, 2])
    response = server.test("/v2/models/strings/infer", body, silent=True)
    assert response.status_code == 400 and "missing input 'x'" in response.body["error"]
    x = {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}
    assert server.test("/v2/models/strings/infer", {"inputs": [x]})["outputs"]
    response = server.test(
        "/v2/models/strings/infer", {"inputs": [{**x, "datatype": "FP64"}]}, silent=True
    )
    assert response.status_code == 400 and "datatype FP64, expected FP32" in response.body["error"]


def test_signature_name_parameter_sets_metadata(models: TFModels) -> None:
    fn = mlserve.new_function("tf")
    fn.add_model(
        "s", model_path=str(models.module), class_name=TFModelServer, signature_name="concat"
    )
    server = fn.to_mock_server()
    assert [i["name"] for i in server.test("/v2/models/s")["inputs"]] == ["a", "b"]
    body = {
        "inputs": [
            {"name": "a", "datatype": "BYTES", "shape": [1], "data": ["p"]},
            {"name": "b", "datatype": "BYTES", "shape": [1], "data": ["q"]},
        ]
    }
    assert server.test("/v2/models/s/infer", body)["outputs"][0]["data"] == ["pq"]
