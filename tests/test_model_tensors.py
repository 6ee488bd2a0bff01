"""Tensor-form requests through a model (docs/models.md#request-forms): every JSON
datatype round-trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve.protocol.tensors import DATATYPES
from tests.fixtures import Declared, DeclaredOne, TensorEcho, TensorSum, serve

TESTDATA = Path(__file__).parent / "testdata"

# Values at the edges of each datatype JSON can carry (BF16 is binary only).
EDGES: dict[str, list[Any]] = {
    "BOOL": [True, False, False, True],
    "UINT8": [0, 1, 254, 255],
    "UINT16": [0, 1, 65534, 65535],
    "UINT32": [0, 1, 2**32 - 2, 2**32 - 1],
    "UINT64": [0, 1, 2**63, 2**64 - 1],
    "INT8": [-128, -1, 0, 127],
    "INT16": [-32768, -1, 0, 32767],
    "INT32": [-(2**31), -1, 0, 2**31 - 1],
    "INT64": [-(2**63), -1, 0, 2**63 - 1],
    "FP16": [-65504.0, -0.5, 0.0, 1.5],
    "FP32": [-3.4028234663852886e38, 0.25, 0.0, 1.5],
    "FP64": [-1.7976931348623157e308, 0.1, 5e-324, 1.5],
    "BYTES": ["", "a", "héllo", "with space"],
}


@pytest.fixture(scope="module")
def server() -> mlserve.GraphServer:
    return serve(
        {
            "echo": TensorEcho,
            "echo:2": TensorEcho,
            "sum": TensorSum,
            "declared": Declared,
            "one": DeclaredOne,
        }
    )


def _tensor(name: str, datatype: str, data: list[Any], shape: list[int]) -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


@pytest.mark.parametrize("datatype", sorted(EDGES))
@pytest.mark.parametrize(
    ("shape", "nest"),
    [([4], False), ([2, 2], False), ([2, 2], True), ([1, 4], True), ([4, 1, 1], False)],
)
def test_every_json_datatype_round_trips(
    server: mlserve.GraphServer, datatype: str, shape: list[int], nest: bool
) -> None:
    values = EDGES[datatype]
    data = np.array(values, dtype=object).reshape(shape).tolist() if nest else values
    TensorEcho.seen.clear()
    answer = server.test(
        "/v2/models/echo/infer", body={"id": "t", "inputs": [_tensor("x", datatype, data, shape)]}
    )
    seen = TensorEcho.seen[-1]["inputs"]
    assert isinstance(seen, np.ndarray)
    assert seen.dtype == DATATYPES[datatype]
    assert seen.shape == tuple(shape)
    assert seen.ravel().tolist() == values
    assert answer == {
        "id": "t",
        "model_name": "echo",
        "outputs": [_tensor("output-0", datatype, values, shape)],
    }


def test_bf16_in_json_is_a_400_naming_the_tensor(server: mlserve.GraphServer) -> None:
    response = server.test(
        "/v2/models/echo/infer", silent=True, body={"inputs": [_tensor("x", "BF16", [1.0], [1])]}
    )
    assert response.status_code == 400
    assert response.body == {
        "error": "InvalidInput: tensor 'x': BF16 data must be sent in binary form"
    }


def test_versioned_tensor_response_has_model_version(server: mlserve.GraphServer) -> None:
    answer = server.test(
        "/v2/models/echo/versions/2/infer", body={"inputs": [_tensor("x", "INT8", [1], [1])]}
    )
    assert answer["model_name"] == "echo"
    assert answer["model_version"] == "2"
    assert "timestamp" not in answer


def test_id_in_a_tensor_response(server: mlserve.GraphServer) -> None:
    body = {"inputs": [_tensor("x", "INT8", [1], [1])]}
    assert server.test("/v2/models/echo/infer", body=body, event_id="e9")["id"] == "e9"
    assert server.test("/v2/models/echo/infer", body={**body, "id": "b"})["id"] == "b"


def test_several_inputs_reach_predict_as_a_dict(server: mlserve.GraphServer) -> None:
    TensorEcho.seen.clear()
    answer = server.test(
        "/v2/models/echo/infer",
        body={
            "inputs": [
                _tensor("a", "FP32", [1, 2], [2]),
                _tensor("b", "BYTES", ["x"], [1]),
                _tensor("c", "BOOL", [[True], [False]], [2, 1]),
            ]
        },
    )
    seen = TensorEcho.seen[-1]
    assert set(seen["inputs"]) == {"a", "b", "c"}
    assert seen["inputs"]["a"].dtype == np.float32
    assert seen["inputs"]["c"].shape == (2, 1)
    assert seen.tensors["b"].tolist() == ["x"]
    assert [o["name"] for o in seen.input_objects] == ["a", "b", "c"]
    assert answer["outputs"] == [
        _tensor("a", "FP32", [1.0, 2.0], [2]),
        _tensor("b", "BYTES", ["x"], [1]),
        _tensor("c", "BOOL", [True, False], [2, 1]),
    ]


def test_a_dict_result_gives_one_tensor_each_with_numpy_types(server: mlserve.GraphServer) -> None:
    answer = server.test(
        "/v2/models/sum/infer", body={"inputs": [_tensor("x", "INT32", [1, 2, 3], [3])]}
    )
    assert answer["outputs"] == [
        _tensor("sum", "FP64", [6.0], [1]),
        _tensor("double", "INT32", [2, 4, 6], [3]),
        _tensor("label", "BYTES", ["small"], [1]),
    ]


@pytest.mark.parametrize(
    ("requested", "names"),
    [(["sum"], ["sum"]), (["label", "sum"], ["label", "sum"]), (["double"], ["double"])],
)
def test_requested_outputs_filter(
    server: mlserve.GraphServer, requested: list[str], names: list[str]
) -> None:
    answer = server.test(
        "/v2/models/sum/infer",
        body={
            "inputs": [_tensor("x", "FP64", [5, 6], [2])],
            "outputs": [{"name": n} for n in requested],
        },
    )
    assert [o["name"] for o in answer["outputs"]] == names


def test_unknown_requested_output_is_400(server: mlserve.GraphServer) -> None:
    response = server.test(
        "/v2/models/sum/infer",
        silent=True,
        body={"inputs": [_tensor("x", "FP64", [5], [1])], "outputs": [{"name": "nope"}]},
    )
    assert response.status_code == 400
    assert response.body == {
        "error": "InvalidInput: unknown requested output(s) ['nope'], "
        "the model outputs ['double', 'label', 'sum']"
    }


def test_declared_first_output_names_the_single_tensor(server: mlserve.GraphServer) -> None:
    answer = server.test(
        "/v2/models/one/infer", body={"inputs": [_tensor("x", "INT64", [1, 2, 3, 4], [2, 2])]}
    )
    assert answer["outputs"] == [_tensor("y", "INT64", [3, 7], [2])]


def test_declared_inputs_accept_a_matching_request(server: mlserve.GraphServer) -> None:
    answer = server.test(
        "/v2/models/declared/infer",
        body={
            "inputs": [
                _tensor("features", "FP32", [[1, 2, 3], [4, 5, 6]], [2, 3]),
                _tensor("mask", "BOOL", [True, False], [2]),
            ]
        },
    )
    assert answer["outputs"] == [_tensor("score", "FP32", [6.0, 0.0], [2])]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [_tensor("features", "FP64", [1, 2, 3], [1, 3]), _tensor("mask", "BOOL", [True], [1])],
            "input 'features' has datatype FP64, expected FP32",
        ),
        (
            [
                _tensor("features", "FP32", [1, 2, 3, 4], [1, 4]),
                _tensor("mask", "BOOL", [True], [1]),
            ],
            "unexpected shape for input 'features' for model 'declared'. "
            "Expected [-1,3], got [1,4]",
        ),
        (
            [_tensor("features", "FP32", [1, 2, 3], [1, 3])],
            "expected 2 inputs but got 1 inputs for model 'declared': missing input 'mask'",
        ),
        (
            [_tensor("features", "FP32", [1, 2, 3], [1, 3]), _tensor("mask", "INT8", [1], [1])],
            "input 'mask' has datatype INT8, expected BOOL",
        ),
        (
            [
                _tensor("features", "FP32", [1, 2, 3], [1, 3]),
                _tensor("mask", "BOOL", [True], [1]),
                _tensor("other", "BOOL", [True], [1]),
            ],
            "expected 2 inputs but got 3 inputs for model 'declared': unexpected input 'other'",
        ),
    ],
)
def test_declared_input_mismatch_is_400_naming_the_input(
    server: mlserve.GraphServer, inputs: list[Any], message: str
) -> None:
    response = server.test("/v2/models/declared/infer", body={"inputs": inputs}, silent=True)
    assert (response.status_code, response.body) == (400, {"error": f"InvalidInput: {message}"})


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            _tensor("x", "FP32", [1, 2, 3], [2, 2]),
            "tensor 'x': expected 4 elements for shape [2, 2], got 3",
        ),
        (_tensor("x", "INT8", [1000], [1]), "tensor 'x': 1000 is out of range for INT8"),
        (
            _tensor("x", "BOOL", [2], [1]),
            "tensor 'x': BOOL values must be JSON booleans or 0/1 integers",
        ),
        (_tensor("x", "FP32", ["1.5"], [1]), "tensor 'x': '1.5' is not a valid FP32 value"),
        (_tensor("x", "BYTES", [1], [1]), "tensor 'x': 1 is not a valid BYTES value"),
        (_tensor("x", "COMPLEX", [1], [1]), "tensor 'x': unknown datatype 'COMPLEX'"),
    ],
)
def test_shape_and_data_mismatches_are_400_naming_the_tensor(
    server: mlserve.GraphServer, tensor: dict[str, Any], message: str
) -> None:
    response = server.test("/v2/models/echo/infer", body={"inputs": [tensor]}, silent=True)
    assert response.status_code == 400
    assert response.body["error"].startswith(f"InvalidInput: {message}")


def test_numpy_outputs_never_500() -> None:
    class Odd(mlserve.V2ModelServer):
        def predict(self, request: dict[str, Any]) -> Any:
            kind = request["inputs"]["kind"][0]
            return {
                "scalar": np.float64(2.5),
                "zero-d": np.array(3, dtype=np.int16),
                "fortran": np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
                "big-endian": np.arange(3, dtype=">i4"),
                "strings": np.array(["a", "bb"]),
                "bytes": np.array([b"x", b"yz"], dtype=object),
                "list": [np.int8(1), np.int8(2)],
            }[kind]

    server = serve({"odd": Odd})
    expected = {
        "scalar": ("FP64", [], [2.5]),
        "zero-d": ("INT16", [], [3]),
        "fortran": ("INT32", [2, 3], [0, 1, 2, 3, 4, 5]),
        "big-endian": ("INT32", [3], [0, 1, 2]),
        "strings": ("BYTES", [2], ["a", "bb"]),
        "bytes": ("BYTES", [2], ["x", "yz"]),
        "list": ("INT8", [2], [1, 2]),
    }
    for kind, (datatype, shape, data) in expected.items():
        answer = server.test(
            "/v2/models/odd/infer",
            body={
                "inputs": [
                    _tensor("kind", "BYTES", [kind], [1]),
                    _tensor("pad", "BOOL", [True], [1]),
                ]
            },
        )
        assert answer["outputs"] == [_tensor("output-0", datatype, data, shape)], kind


def test_a_mixed_list_is_the_rows_form(server: mlserve.GraphServer) -> None:
    TensorEcho.seen.clear()
    inputs = [_tensor("x", "INT8", [1], [1]), 5]
    answer = server.test("/v2/models/echo/infer", body={"inputs": inputs})
    assert TensorEcho.seen[-1]["inputs"] == inputs
    assert "timestamp" in answer


@pytest.mark.parametrize("name", sorted(p.name for p in TESTDATA.glob("tensor-*.json")))
def test_payload_files(server: mlserve.GraphServer, name: str) -> None:
    case = json.loads((TESTDATA / name).read_text())
    response = server.test(case["path"], body=case["request"], silent=True, get_body=False)
    assert response.status_code == case["status"]
    assert json.loads(response.body) == case["response"]


def test_fp32_values_come_back_as_the_same_float32(server: mlserve.GraphServer) -> None:
    answer = server.test(
        "/v2/models/echo/infer", body={"inputs": [_tensor("x", "FP32", [0.1, 1e-7], [2])]}
    )
    data = answer["outputs"][0]["data"]
    assert (
        np.array(data, dtype=np.float32).tolist()
        == np.array([0.1, 1e-7], dtype=np.float32).tolist()
    )
