"""The codec's fast branches (the common small tensor in, a plain array out) give
exactly what the general path gives: the same array, object or error message.

Each test runs both: the general path is reached with the same values in a dict,
list or ndarray subclass, which the fast branches leave to it.
"""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.forms import InferenceRequest, build_outputs, decode_request, parse_json_body
from mlserve.protocol.tensors import (
    DATATYPES,
    RAW,
    decode_tensor,
    dumps,
    encode_tensor,
    join_binary_body,
    plain_tensor,
)

SETTINGS = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


class _Dict(dict):  # type: ignore[type-arg]
    """A tensor object the fast branches leave to the general path."""


class _Array(np.ndarray):  # type: ignore[type-arg]
    """An output array the fast branches leave to the general path."""


def _outcome(call: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(*args, **kwargs)
    except InvalidInput as exc:
        return f"InvalidInput: {exc}"


def _same_array(fast: Any, general: Any) -> None:
    if isinstance(general, str) or isinstance(fast, str):
        assert fast == general
        return
    assert type(fast) is np.ndarray
    assert fast.dtype == general.dtype
    assert fast.shape == general.shape
    assert fast.flags.writeable and fast.flags.c_contiguous
    if general.dtype.kind == "f":
        np.testing.assert_array_equal(fast, general)  # NaN matches NaN
        assert np.array_equal(np.signbit(fast), np.signbit(general))  # -0.0 stays -0.0
    else:
        assert fast.tolist() == general.tolist()


# Numbers at the edges: NaN, infinities, -0.0, floats past float16/float32, ints past
# float64's 53 bits, past int64 and uint64; and what is no number at all.
EDGE_INTS = st.sampled_from(
    [0, 1, -1, 255, 256, -129, 2**31, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1, 2**63]
    + [-(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 10**30]
)
EDGE_FLOATS = st.sampled_from(
    [0.0, -0.0, 1.5, -2.0, 65504.0, 65520.0, 3.4e38, 3.5e38, 2.0**53, 2.0**53 + 2, 1e300]
    + [float("nan"), float("inf"), float("-inf")]
)
NUMBERS = (
    st.integers(-(2**65), 2**65)
    | st.floats(width=64)
    | EDGE_INTS
    | EDGE_FLOATS
    | st.booleans()
    | st.floats(width=16)
)
ODD = st.sampled_from(["1.5", None, [1.0], [], {"a": 1}, b"1"])
ELEMENTS = NUMBERS | ODD
DATATYPE = st.sampled_from([*DATATYPES, "FP8", "fp32"])


@st.composite
def _tensors(draw: st.DrawFn) -> dict[str, Any]:
    kinds = draw(st.sampled_from(["ints", "floats", "mixed", "any"]))
    element = {
        "ints": st.integers(-(2**64), 2**64) | EDGE_INTS,
        "floats": st.floats(width=64) | EDGE_FLOATS,
        "mixed": NUMBERS,
        "any": ELEMENTS,
    }[kinds]
    data = draw(st.lists(element, max_size=70))
    size = len(data)
    shape = draw(
        st.sampled_from([[size], [1, size], [size, 1], [], [1], [-1, -size], [size + 1]])
        | st.lists(st.integers(-3, 5), max_size=3)
        | st.just([True, size])
        | st.just((1, size))
    )
    obj: dict[str, Any] = {"name": draw(st.sampled_from(["x", "", 7])), "shape": shape}
    obj["datatype"] = draw(DATATYPE | st.just(["FP32"]))
    obj["data"] = draw(st.just(data) | st.just([data]) | st.just(data[0] if data else 1.0))
    return obj


@SETTINGS
@given(obj=_tensors())
def test_json_data_decodes_as_the_general_path_does(obj: dict[str, Any]) -> None:
    _same_array(_outcome(decode_tensor, obj), _outcome(decode_tensor, _Dict(obj)))


@SETTINGS
@given(
    datatype=DATATYPE,
    shape=st.lists(st.integers(-2, 4), max_size=3),
    extra=st.sampled_from([0, 0, 0, 1, -1]),
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from([bytes, bytearray, memoryview]),
)
def test_raw_data_decodes_as_the_general_path_does(
    datatype: str, shape: list[int], extra: int, seed: int, kind: type
) -> None:
    itemsize = DATATYPES.get(datatype, np.dtype(np.float32)).itemsize
    length = max(0, int(np.prod(shape)) * itemsize + extra)
    raw = kind(np.random.default_rng(seed).bytes(length))
    obj = {"name": "x", "shape": shape, "datatype": datatype, RAW: raw, "data": [1]}
    _same_array(_outcome(decode_tensor, obj), _outcome(decode_tensor, _Dict(obj)))


@SETTINGS
@given(
    array=hnp.arrays(
        st.sampled_from(["<f4", ">f4", "<f8", "<f2", "<i4", "<i8", "<u8", "?"]).map(np.dtype),
        hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=4),
    ),
    datatype=DATATYPE,
    reshape=st.booleans(),
)
def test_ndarray_data_decodes_as_the_general_path_does(
    array: np.ndarray, datatype: str, reshape: bool
) -> None:
    shape = [array.size] if reshape else [*array.shape, 1]
    obj = {"name": "x", "shape": shape, "datatype": datatype, "data": array}
    _same_array(_outcome(decode_tensor, obj), _outcome(decode_tensor, _Dict(obj)))


@pytest.mark.parametrize(
    "obj",
    [
        {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2, 3.5, -0.0]},
        {"name": "x", "shape": [2], "datatype": "INT64", "data": [2**63 - 1, -(2**63)]},
        {"name": "x", "shape": [1], "datatype": "UINT64", "data": [2**64 - 1]},
        {"name": "x", "shape": [], "datatype": "FP64", "data": [2.5]},
        {"name": "x", "shape": [2], "datatype": "FP16", "data": [1.0, float("nan")]},
        {"name": "x", "shape": [1, 2], "datatype": "INT8", RAW: b"\x01\xff"},
        {"name": "x", "shape": [2], "datatype": "FP32", "data": np.ones(2, np.float32)},
    ],
)
def test_the_common_tensors_take_the_fast_branch(obj: dict[str, Any]) -> None:
    fast = plain_tensor(obj)
    assert fast is not None
    _same_array(fast, decode_tensor(_Dict(obj)))


@pytest.mark.parametrize(
    "change",
    [
        {"data": [float("nan"), 1.0]},  # a NaN first: the checked path decides
        {"data": [True, 2.0]},  # bools
        {"data": [[1.0, 2.0]]},  # nested
        {"data": [1.0, "2"]},  # text
        {"data": [1.5, 2.0], "datatype": "INT32"},  # floats for an integer type
        {"data": [2**53 + 1, 1.0]},  # an int that float64 would round
        {"data": [3.5e38, 1.0]},  # past float32
        {"data": [1.0] * 65, "shape": [65]},  # beyond the small size
        {"shape": [3]},  # a count the shape does not hold
        {"shape": [-1, -2]},  # negative dimensions
        {"shape": [True, 2]},  # a bool dimension
        {"datatype": "BOOL", "data": [1, 0]},
        {"datatype": "BF16"},
        {"datatype": ["FP32"]},  # unhashable
        {"name": ""},
        {RAW: b"\x00" * 7},  # the wrong length
        {RAW: bytearray(8)},
        {"data": np.ones(2, np.int32), "datatype": "INT32"},  # integer ndarrays: checked
    ],
)
def test_odd_tensors_take_the_general_path(change: dict[str, Any]) -> None:
    obj = {"name": "x", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0], **change}
    assert plain_tensor(obj) is None
    _same_array(_outcome(decode_tensor, obj), _outcome(decode_tensor, _Dict(obj)))


@SETTINGS
@given(
    obj=_tensors(),
    parameters=st.sampled_from([None, {}, {"a": 1}, [1]]),
    outputs=st.sampled_from([None, [{"name": "y"}], [{"name": "y", "parameters": 1}], [3]]),
)
def test_a_one_tensor_request_decodes_as_the_general_path_does(
    obj: dict[str, Any], parameters: Any, outputs: Any
) -> None:
    body: dict[str, Any] = {"inputs": [obj], "id": "1"}
    if parameters is not None:
        body["parameters"] = parameters
    if outputs is not None:
        body["outputs"] = outputs
    fast = _outcome(decode_request, body)
    general = _outcome(decode_request, {**body, "inputs": [_Dict(obj)]})
    if isinstance(general, str):
        assert fast == general
        return
    assert type(fast) is InferenceRequest
    assert fast.keys() == general.keys()
    assert fast["id"] == "1" and fast.input_objects is body["inputs"]
    assert list(fast.tensors) == list(general.tensors)
    _same_array(fast["inputs"], general["inputs"])
    assert fast.tensors[obj["name"]] is fast["inputs"]


@pytest.mark.parametrize("inputs", [[[1.0, 2.0]], [[1.0], [2.0]], [[]], [[{"datatype": "FP32"}]]])
def test_rows_come_back_as_they_came(inputs: list[Any]) -> None:
    body = {"inputs": inputs}
    assert decode_request(body) is body


DTYPES = st.sampled_from(
    ["<f4", ">f4", "<f8", "<f2", ">i4", "<i8", "<u8", "<u1", "?", "<M8[s]", "O", "<U3"]
)


def _arrays() -> st.SearchStrategy[np.ndarray]:
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
    arrays = DTYPES.map(np.dtype).flatmap(
        lambda dtype: hnp.arrays(dtype, shapes) if dtype.kind not in "OMU" else st.nothing()
    )
    plain = arrays | st.sampled_from(
        [np.arange(12.0).reshape(3, 4).T, np.arange(10, dtype=np.int32)[::2], np.zeros(100)]
    )
    return plain | st.just(np.array(["a", "b"])) | st.just(np.array([1, "x"], dtype=object))


@SETTINGS
@given(array=_arrays(), binary=st.booleans())
def test_outputs_encode_as_the_general_path_does(array: np.ndarray, binary: bool) -> None:
    fast = _outcome(encode_tensor, "y", array, binary=binary)
    general = _outcome(encode_tensor, "y", array.view(_Array), binary=binary)
    if isinstance(general, str):
        assert fast == general
        return
    assert list(fast) == list(general)  # the same keys, in the same order
    assert dumps(fast) == dumps(general)  # -0.0, NaN and the bytes included


@SETTINGS
@given(
    array=_arrays(),
    request=st.sampled_from(
        [
            {},
            {"parameters": {}},
            {"parameters": {"binary_data_output": True}},
            {"parameters": {"binary_data_output": False}},
            {"outputs": [{"name": "y", "parameters": {"binary_data": True}}]},
            {"outputs": [{"name": "y"}], "parameters": {"binary_data_output": True}},
            {
                "outputs": [{"name": "y", "parameters": {"binary_data": False}}],
                "parameters": {"binary_data_output": True},
            },
            {"outputs": [{"name": "y", "parameters": None}]},
            {"outputs": [{"name": "z"}]},
            {"outputs": [{"name": "y"}, {"name": "y"}]},
            {"outputs": None},
        ]
    ),
)
def test_an_array_answer_builds_the_outputs_the_general_path_does(
    array: np.ndarray, request: dict[str, Any]
) -> None:
    fast = _outcome(build_outputs, array, request, "y")
    general = _outcome(build_outputs, array.view(_Array), request, "y")
    if isinstance(general, str):
        assert fast == general
        return
    assert [list(obj) for obj in fast] == [list(obj) for obj in general]
    assert dumps(fast) == dumps(general)


def _joined_generally(body: dict[str, Any]) -> tuple[bytes, int]:
    """join_binary_body's general code, for every output: each loses its bytes to the
    tail and names their size in a parameters object of its own."""
    chunks: list[bytes] = []
    outputs = []
    for obj in body["outputs"]:
        if obj.get(RAW) is None:
            outputs.append(obj)
            continue
        chunks.append(bytes(obj[RAW]))
        detached = {key: value for key, value in obj.items() if key != RAW}
        size = {"binary_data_size": len(chunks[-1])}
        detached["parameters"] = {**(obj.get("parameters") or {}), **size}
        outputs.append(detached)
    text = dumps({**body, "outputs": outputs})
    return text + b"".join(chunks), len(text)


@SETTINGS
@given(
    array=_arrays(),
    change=st.sampled_from(
        [{}, {"parameters": {"shm": 1}}, {"parameters": None}, {"extra": 1}, {"reorder": True}]
    ),
)
def test_binary_answers_join_as_the_general_code_does(
    array: np.ndarray, change: dict[str, Any]
) -> None:
    obj = _outcome(encode_tensor, "y", array, binary=True)
    if isinstance(obj, str):
        return
    if change.pop("reorder", False):
        obj = {RAW: obj[RAW], **{key: value for key, value in obj.items() if key != RAW}}
    obj.update(change)
    body = {"id": "1", "model_name": "m", "outputs": [obj, {"name": "z", "data": [1]}]}
    assert join_binary_body(body) == _joined_generally(body)


ROOT = Path(__file__).resolve().parents[2]


def _converted(body: dict[str, Any], raw: bool) -> Any:
    """The serialized ModelInferResponse of ``body``, or the error it raises."""
    from mlserve.grpc.convert import infer_from_core

    try:
        return infer_from_core(body, raw).SerializeToString(deterministic=True)
    except (InvalidInput, TypeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


@SETTINGS
@given(
    array=_arrays(),
    raw=st.booleans(),
    change=st.sampled_from(
        [
            {},
            {},
            {"parameters": {"binary_data_size": 0}},  # a size that is not the bytes'
            {"parameters": {"binary_data_size": 4, "x": 1}},
            {"parameters": None},
            {RAW: bytearray(b"abcd")},
            {RAW: b"abc"},  # bytes the shape does not hold
            {"shape": [3]},
            {"shape": ["1"]},
            {"datatype": "BYTES"},
            {"datatype": "BOOL"},
            {"datatype": "FP16"},  # no typed field: raw
            {"datatype": "INT64"},
            {"extra": 1},
        ]
    ),
)
def one_output_cases(array: np.ndarray, raw: bool, change: dict[str, Any]) -> None:
    """infer_from_core's branch for one output as plain_output encodes it, against its
    loop for every output (reached with a dict subclass)."""
    obj = _outcome(encode_tensor, "y", array, binary=True)
    if isinstance(obj, str):
        return  # no tensor to convert (encode_tensor's own error)
    obj = {**obj, **change}
    if RAW in change:
        obj["parameters"] = {"binary_data_size": len(change[RAW])}
    body = {"model_name": "m", "id": "1", "outputs": [obj]}
    fast = _converted(body, raw)
    assert fast == _converted({**body, "outputs": [_Dict(obj)]}, raw)


def test_one_output_converts_as_the_general_loop_does() -> None:
    """one_output_cases, in a child process: mlserve's protobuf stubs cannot share a
    descriptor pool with tritonclient's, which other tests import."""
    code = "from tests.protocol.test_fast_paths import one_output_cases; one_output_cases()"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-6000:]


@pytest.mark.parametrize(
    "body",
    [
        b'{"inputs": [1, 2]}',
        b'{"x": NaN}',
        b"[1, 2",
        b'"\\ud800"',
        b"",
        struct.pack("<f", 1.0),
    ],
)
@pytest.mark.parametrize("content_type", ["application/json", "json", "", "text/plain"])
def test_json_bodies_parse_as_the_general_path_does(body: bytes, content_type: str) -> None:
    fast = _outcome(parse_json_body, body, content_type)
    general = _outcome(parse_json_body, bytearray(body), content_type)
    assert repr(fast) == repr(bytes(general) if isinstance(general, bytearray) else general)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"parameters": [1]}, "'parameters' of the request must be an object, got list"),
        ({"outputs": [{"name": "y", "parameters": 1}]}, "of output 'y' must be an object, got int"),
        (
            {"parameters": "x", "outputs": [{"name": "y", "parameters": 1}]},
            "'parameters' of the request must be an object, got str",
        ),
        ({"outputs": [{"name": "y"}, {"parameters": []}]}, "of output None must be an object"),
    ],
)
def test_parameters_that_are_not_objects_are_refused(body: dict[str, Any], message: str) -> None:
    tensor = {"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}
    for inputs in ([tensor], [_Dict(tensor)]):  # the fast branch and the general path
        with pytest.raises(InvalidInput, match=re.escape(message)):
            decode_request({"inputs": inputs, **body})
