"""Request forms (docs/models.md#request-forms): rows vs tensors, declared inputs, output
tensors, the JSON body rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.forms import (
    InferenceRequest,
    build_outputs,
    check_declared_inputs,
    check_declared_rows,
    decode_request,
    is_tensor_inputs,
    parse_json_body,
    wants_binary,
)
from mlserve.protocol.tensors import RAW

T = {"name": "x", "shape": [2], "datatype": "INT32", "data": [1, 2]}


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ([T], True),
        ([T, {**T, "name": "y"}], True),
        ([{"name": "x", "shape": [1], "datatype": "FP32"}], True),  # data may come in binary
        ([], False),
        (None, False),
        ([1, 2], False),
        ([[1, 2]], False),
        ([T, 1], False),  # every element must be a tensor object
        ([{"name": "x", "shape": [1]}], False),
        ([{"name": "x", "datatype": "FP32"}], False),
        ([{"shape": [1], "datatype": "FP32", "data": [1]}], False),
        ({"name": "x", "shape": [1], "datatype": "FP32"}, False),
        ("x", False),
    ],
)
def test_is_tensor_inputs(inputs: Any, expected: bool) -> None:
    assert is_tensor_inputs(inputs) is expected


@pytest.mark.parametrize(
    "body",
    [{"inputs": [1, 2]}, {"inputs": [[1, 2]]}, {"inputs": [T, 3]}, {"nothing": 1}, {"inputs": []}],
)
def test_rows_form_is_returned_as_it_came(body: dict[str, Any]) -> None:
    assert decode_request(body) is body


def test_one_tensor_is_an_ndarray_with_the_originals_beside_it() -> None:
    body = {
        "id": "r",
        "inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}],
        "parameters": {"p": 1},
    }
    request = decode_request(body)
    assert isinstance(request, InferenceRequest)
    assert isinstance(request["inputs"], np.ndarray)
    assert request["inputs"].dtype == np.float32
    assert request["inputs"].shape == (2, 2)
    assert request["id"] == "r" and request["parameters"] == {"p": 1}
    assert list(request.tensors) == ["x"]
    assert request.input_objects == body["inputs"]
    assert body["inputs"][0]["data"] == [1, 2, 3, 4]  # the original body is not changed


def test_several_tensors_are_a_dict_by_name() -> None:
    request = decode_request(
        {"inputs": [T, {"name": "y", "shape": [1], "datatype": "BYTES", "data": ["a"]}]}
    )
    assert set(request["inputs"]) == {"x", "y"}
    assert request["inputs"]["x"].tolist() == [1, 2]
    assert request["inputs"]["y"].tolist() == ["a"]


def test_a_tensor_given_twice_is_400() -> None:
    with pytest.raises(InvalidInput, match="input 'x' is given twice"):
        decode_request({"inputs": [T, T]})


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ({**T, "data": [1, 2, 3]}, "tensor 'x': expected 2 elements for shape [2], got 3"),
        ({**T, "shape": [3, 1]}, "tensor 'x': expected 3 elements for shape [3, 1], got 2"),
        ({**T, "datatype": "INT99"}, "tensor 'x': unknown datatype 'INT99'"),
        ({**T, "data": [1.5, 2]}, "tensor 'x': 1.5 is not a valid INT32 value"),
        ({**T, "data": ["a", "b"]}, "tensor 'x': 'a' is not a valid INT32 value"),
        ({**T, "shape": [-2]}, "tensor 'x': shape [-2] must hold non-negative integers"),
        ({"name": "x", "shape": [1], "datatype": "FP32"}, "tensor 'x': missing 'data'"),
        (
            {**T, "datatype": "BF16", "data": [1.0, 2.0]},
            "tensor 'x': BF16 data must be sent in binary form",
        ),
        ({**T, "datatype": "UINT8", "data": [1, 300]}, "tensor 'x': 300 is out of range for UINT8"),
    ],
)
def test_bad_tensors_are_400_naming_the_tensor(tensor: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_request({"inputs": [tensor]})
    assert str(info.value).startswith(message)


# ---- declared inputs ----

DECLARED = [
    {"name": "features", "datatype": "FP32", "shape": [-1, 3]},
    {"name": "mask", "datatype": "BOOL", "shape": [-1]},
]


def _tensors(**arrays: Any) -> dict[str, np.ndarray]:
    return {name: np.asarray(value) for name, value in arrays.items()}


def test_declared_inputs_accept_matching_tensors() -> None:
    check_declared_inputs(
        _tensors(features=np.zeros((2, 3), np.float32), mask=np.ones(2, bool)), DECLARED
    )
    check_declared_inputs(
        _tensors(features=np.zeros((0, 3), np.float32), mask=np.ones(7, bool)), DECLARED
    )


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        (
            _tensors(features=np.zeros((2, 3), np.int32), mask=np.ones(2, bool)),
            "input 'features' has datatype INT32, expected FP32",
        ),
        (
            _tensors(features=np.zeros((2, 4), np.float32), mask=np.ones(2, bool)),
            "unexpected shape for input 'features'. Expected [-1,3], got [2,4]",
        ),
        (
            _tensors(features=np.zeros(3, np.float32), mask=np.ones(2, bool)),
            "unexpected shape for input 'features'. Expected [-1,3], got [3]",
        ),
        (
            _tensors(features=np.zeros((2, 3), np.float32)),
            "expected 2 inputs but got 1 inputs: missing input 'mask'",
        ),
        (
            _tensors(
                features=np.zeros((2, 3), np.float32), mask=np.ones(2, bool), extra=np.ones(1)
            ),
            "expected 2 inputs but got 3 inputs: unexpected input 'extra'",
        ),
        (
            _tensors(features=np.zeros((2, 3), np.float32), mask=np.ones((2, 1), bool)),
            "unexpected shape for input 'mask'. Expected [-1], got [2,1]",
        ),
    ],
)
def test_declared_input_mismatch_names_the_input(
    tensors: dict[str, np.ndarray], message: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        check_declared_inputs(tensors, DECLARED)
    assert str(info.value) == message


def test_one_declared_input_accepts_one_tensor_of_any_name() -> None:
    declared = [{"name": "x", "datatype": "INT64", "shape": [-1]}]
    check_declared_inputs(_tensors(whatever=np.arange(3)), declared)
    with pytest.raises(InvalidInput, match="input 'x' has datatype FP64, expected INT64"):
        check_declared_inputs(_tensors(whatever=np.zeros(3)), declared)


def test_exact_names_refuse_another_name_for_the_one_declared_input() -> None:
    declared = [{"name": "x", "datatype": "INT64", "shape": [-1]}]
    check_declared_inputs(_tensors(x=np.arange(3)), declared, exact_names=True)
    with pytest.raises(InvalidInput) as info:
        check_declared_inputs(_tensors(whatever=np.arange(3)), declared, exact_names=True)
    assert str(info.value) == "unexpected input 'whatever', the model's inputs are ['x']"


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([[1.0, 2.0, 3.0, 4.0]], None),
        ([[1.0, 2.0, 3.0]], "input 'm' has shape [1, 3], expected [-1, 4]"),
        ([[[1.0, 2.0, 3.0]]], None),  # another rank: the model's own code reads it
        ([[1.0, 2.0], [3.0]], None),  # ragged: the model's own code decides
        ([["a", "b", "c"]], "input 'm' has datatype BYTES, expected FP64"),  # as tensors
        ([[1, 2, 3, 4]], None),  # a JSON number fits any numeric datatype
    ],
)
def test_rows_fit_the_one_declared_input(rows: list, error: str | None) -> None:
    declared = [{"name": "m", "datatype": "FP64", "shape": [-1, 4]}]
    if error is None:
        check_declared_rows(rows, declared)
    else:
        with pytest.raises(InvalidInput) as info:
            check_declared_rows(rows, declared)
        assert str(info.value) == error


def test_declared_bf16_accepts_its_float32_decoding() -> None:
    check_declared_inputs(
        _tensors(x=np.zeros(2, np.float32)), [{"name": "x", "datatype": "BF16", "shape": [2]}]
    )


def test_declared_input_without_datatype_or_shape_checks_what_is_given() -> None:
    check_declared_inputs(_tensors(x=np.zeros((5, 5))), [{"name": "x"}])
    check_declared_inputs(_tensors(x=np.zeros((5, 5))), [{"name": "x", "datatype": "FP64"}])


# ---- output tensors ----


def test_an_array_like_is_one_tensor_with_the_default_name() -> None:
    assert build_outputs([[1, 2], [3, 4]], {}, "output-0") == [
        {"name": "output-0", "datatype": "INT64", "shape": [2, 2], "data": [1, 2, 3, 4]}
    ]


def test_a_dict_is_one_tensor_per_name() -> None:
    outputs = build_outputs({"a": np.float32([1.5]), "b": ["x", "y"]}, {}, "output-0")
    assert outputs == [
        {"name": "a", "datatype": "FP32", "shape": [1], "data": [1.5]},
        {"name": "b", "datatype": "BYTES", "shape": [2], "data": ["x", "y"]},
    ]


def test_tensor_objects_pass_through() -> None:
    given = [{"name": "z", "datatype": "FP64", "shape": [1], "data": [0.5], "parameters": {"k": 1}}]
    assert build_outputs(given, {}, "output-0") == given


def test_requested_outputs_filter_and_order() -> None:
    result = {"a": [1], "b": [2], "c": [3]}
    outputs = build_outputs(result, {"outputs": [{"name": "c"}, {"name": "a"}]}, "o")
    assert [o["name"] for o in outputs] == ["c", "a"]


@pytest.mark.parametrize(
    ("request_outputs", "message"),
    [
        ([{"name": "nope"}], "unknown requested output(s) ['nope'], the model outputs ['a', 'b']"),
        ([{"name": "a"}, {"name": "zz"}], "unknown requested output(s) ['zz']"),
        ("a", "'outputs' must be a list of objects with a 'name'"),
        ([{"no_name": 1}], "'outputs' must be a list of objects with a 'name'"),
    ],
)
def test_bad_requested_outputs_are_400(request_outputs: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        build_outputs({"a": [1], "b": [2]}, {"outputs": request_outputs}, "o")
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("body", "binary"),
    [
        ({}, False),
        ({"parameters": {"binary_data_output": True}}, True),
        ({"outputs": [{"name": "o", "parameters": {"binary_data": True}}]}, True),
        (
            {
                "outputs": [{"name": "o", "parameters": {"binary_data": False}}],
                "parameters": {"binary_data_output": True},
            },
            False,
        ),
        ({"outputs": [{"name": "other", "parameters": {"binary_data": True}}]}, False),
    ],
)
def test_wants_binary(body: dict[str, Any], binary: bool) -> None:
    assert wants_binary(body, "o") is binary


def test_binary_outputs_carry_raw_bytes() -> None:
    (output,) = build_outputs(
        np.arange(3, dtype=np.int32), {"parameters": {"binary_data_output": True}}, "o"
    )
    assert output[RAW] == np.arange(3, dtype=np.int32).tobytes()
    assert output["parameters"] == {"binary_data_size": 12}
    assert "data" not in output


# ---- the JSON body rule ----


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        ('{"a": 1}', "", {"a": 1}),
        (b'{"a": 1}', "application/json", {"a": 1}),
        (bytearray(b"[1]"), "text/json", [1]),
        (memoryview(b"2"), "application/json; charset=utf-8", 2),
        ("not json", "", "not json"),
        ('{"a": 1}', "text/plain", '{"a": 1}'),
        (b"\x00", "application/octet-stream", b"\x00"),
        ({"a": 1}, "application/json", {"a": 1}),
        (None, "application/json", None),
    ],
)
def test_parse_json_body(body: Any, content_type: str, expected: Any) -> None:
    assert parse_json_body(body, content_type) == expected


@pytest.mark.parametrize(
    "content_type", ["application/json", "text/json", "json", "Application/JSON"]
)
def test_parse_json_body_bad_json_with_json_type_is_400(content_type: str) -> None:
    with pytest.raises(InvalidInput, match="invalid JSON"):
        parse_json_body("{nope", content_type)


@pytest.mark.parametrize(
    ("obj", "missing"),
    [
        ({"name": "x", "datatype": "FP32", "data": [1.0]}, "shape"),
        ({"shape": [1], "datatype": "FP32", "data": [1.0]}, "name"),
        ({"datatype": "FP32", "data": [1.0]}, "name, shape"),
    ],
)
def test_a_tensor_with_keys_missing_is_a_400_naming_them(obj: dict, missing: str) -> None:
    with pytest.raises(InvalidInput, match=f"missing {missing}"):
        decode_request({"inputs": [obj]})


def test_rows_of_records_without_datatype_stay_rows() -> None:
    body = {"inputs": [{"a": 1, "name": "x"}, {"a": 2}]}
    assert decode_request(body) is body
