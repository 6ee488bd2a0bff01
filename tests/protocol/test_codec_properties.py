"""Hypothesis: the tensor codecs round-trip every datatype, in JSON and in binary,
and no client input makes the server answer 500 or hang."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mlserve.core.events import Response
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.tensors import (
    BINARY_HEADER,
    DATATYPES,
    decode_tensor,
    dumps,
    encode_tensor,
    join_binary_body,
    loads,
    split_binary_body,
)

SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
NUMERIC = [name for name in DATATYPES if name not in ("BYTES", "BF16")]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def _arrays(datatype: str) -> st.SearchStrategy[np.ndarray]:
    dtype = DATATYPES[datatype]
    return hnp.arrays(dtype, SHAPES)  # floats include NaN, infinities and -0.0


def _bytes_arrays(text: bool) -> st.SearchStrategy[np.ndarray]:
    element = st.text(max_size=8).map(str.encode) if text else st.binary(max_size=8)

    def build(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
        count = int(np.prod(shape))
        items = st.lists(element, min_size=count, max_size=count)
        return items.map(lambda values: np.array(values, dtype=object).reshape(shape))

    return SHAPES.flatmap(build)


def _same(actual: np.ndarray, expected: np.ndarray, nan_sign: bool = True) -> None:
    """Equal values; the sign of zeros too, and of NaNs unless the wire cannot carry it
    (JSON's ``NaN`` has none, as Triton writes it)."""
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(actual, expected)  # NaN matches NaN
        signed = np.ones(expected.shape, bool) if nan_sign else ~np.isnan(expected)
        assert np.array_equal(np.signbit(actual)[signed], np.signbit(expected)[signed])
    else:
        assert actual.tolist() == expected.tolist()


def _json_round_trip(array: np.ndarray, datatype: str) -> np.ndarray:
    wire = dumps({"outputs": [encode_tensor("t", array, datatype)]})
    return decode_tensor(loads(wire)["outputs"][0])


def _binary_round_trip(array: np.ndarray, datatype: str) -> np.ndarray:
    data, length = join_binary_body({"outputs": [encode_tensor("t", array, datatype, True)]})
    return decode_tensor(split_binary_body(data, length)["outputs"][0])


@pytest.mark.parametrize("datatype", NUMERIC)
@SETTINGS
@given(data=st.data())
def test_json_round_trip(datatype: str, data: st.DataObject) -> None:
    array = data.draw(_arrays(datatype))
    _same(_json_round_trip(array, datatype), array, nan_sign=False)


@pytest.mark.parametrize("datatype", [*NUMERIC, "BF16"])
@SETTINGS
@given(data=st.data())
def test_binary_round_trip(datatype: str, data: st.DataObject) -> None:
    if datatype == "BF16":  # bfloat16 values: float32 with the low 16 bits clear
        bits = data.draw(hnp.arrays(np.uint16, SHAPES))
        wide = np.array(bits, dtype=np.uint32, ndmin=1).reshape(-1) << np.uint32(16)
        array = wide.view(np.float32).reshape(bits.shape)
        decoded = _binary_round_trip(array, "BF16").astype(np.float32)
        assert decoded.shape == bits.shape
        assert ((decoded.reshape(-1).view(np.uint32) >> 16) == bits.reshape(-1)).all()
        return
    array = data.draw(_arrays(datatype))
    _same(_binary_round_trip(array, datatype), array)


@SETTINGS
@given(array=_bytes_arrays(text=False))
def test_bytes_binary_round_trip(array: np.ndarray) -> None:
    _same(_binary_round_trip(array, "BYTES"), array)


@SETTINGS
@given(array=_bytes_arrays(text=True))
def test_bytes_json_round_trip(array: np.ndarray) -> None:
    decoded = _json_round_trip(array, "BYTES")
    assert decoded.shape == array.shape
    assert [bytes(v) if isinstance(v, bytes) else v.encode() for v in decoded.ravel()] == list(
        array.ravel()
    )


# --- any client input ---------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what JSON writers emit; wider ints: below
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)
TENSORS = st.fixed_dictionaries(
    {
        "name": st.text(max_size=5) | st.integers(),
        "datatype": st.sampled_from([*DATATYPES, "FP8", "", "fp32"]) | JSON_VALUES,
        "shape": st.lists(st.integers(-3, 10**13), max_size=4) | JSON_VALUES,
        "data": JSON_VALUES,
    },
    optional={"parameters": st.dictionaries(st.text(max_size=20), JSON_VALUES, max_size=3)},
)
BODIES = (
    st.fixed_dictionaries(
        {"inputs": st.lists(TENSORS, max_size=3)}, optional={"outputs": JSON_VALUES}
    )
    | st.dictionaries(st.sampled_from(["inputs", "outputs", "id", "parameters"]), JSON_VALUES)
    | JSON_VALUES
)


@pytest.fixture(scope="module")
def server() -> Any:
    import mlserve

    class Echo(mlserve.V2ModelServer):
        def predict(self, request: Any) -> Any:
            tensors = getattr(request, "tensors", None)
            return dict(tensors) if tensors is not None else request["inputs"]

    fn = mlserve.new_function("codec-properties")
    fn.add_model("echo", class_name=Echo)
    return fn.to_mock_server()


def _answer(server: Any, body: bytes, headers: dict[str, str] | None = None) -> Response:
    started = time.monotonic()
    response = server.test(
        "/v2/models/echo/infer",
        body=body,
        headers=headers or {},
        content_type="application/json",
        silent=True,
        get_body=False,
    )
    assert time.monotonic() - started < 5, "no answer within 5 s"
    return response


@SETTINGS
@given(body=BODIES)
def test_any_json_body_is_answered_below_500(server: Any, body: Any) -> None:
    response = _answer(server, dumps(body))
    assert response.status_code < 500, response.body


@SETTINGS
@given(body=st.binary(max_size=200), header=st.integers(-5, 250) | st.text(max_size=4))
def test_any_binary_body_is_answered_below_500(server: Any, body: bytes, header: Any) -> None:
    response = _answer(server, body, {BINARY_HEADER: str(header)})
    assert response.status_code < 500, response.body


@pytest.mark.parametrize(
    "text",
    [
        b'{"inputs":[{"name":"x","datatype":"INT64","shape":[1],"data":[' + b"9" * 40 + b"]}]}",
        b'{"inputs":[{"name":"x","datatype":"FP64","shape":[1],"data":[1e999]}]}',
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[NaN]}], "x": ' + b"[" * 2000,
        b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1000000000000],"data":[1]}]}',
    ],
)
def test_hostile_json_text_is_answered_below_500(server: Any, text: bytes) -> None:
    response = _answer(server, text)
    assert 400 <= response.status_code < 500, response.body


@SETTINGS
@given(tensor=TENSORS)
def test_decode_tensor_raises_only_invalid_input(tensor: dict[str, Any]) -> None:
    try:
        decode_tensor(tensor)
    except InvalidInput:
        pass
