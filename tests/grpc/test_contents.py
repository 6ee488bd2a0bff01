"""Typed and raw tensor contents over real gRPC calls: every datatype, shapes, sizes on
both sides of the small-tensor path, and bad input answered INVALID_ARGUMENT. Outputs
come back raw whatever the request's form (as Triton's), typed when the request's
``typed_outputs`` parameter asks.

The echo model of tests/http/fn.py returns each input as an output of the same name
and datatype, so what comes back is what the server decoded.
"""

from __future__ import annotations

import struct
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import deserialize_bytes_tensor

from tests.netserver import ServerProcess

# datatype -> (typed contents field, numpy dtype, values that reach the type's limits)
TYPED: dict[str, tuple[str, Any, list[Any]]] = {
    "BOOL": ("bool_contents", np.bool_, [True, False, True, True]),
    "INT8": ("int_contents", np.int8, [-128, 127, 0, -1]),
    "INT16": ("int_contents", np.int16, [-(2**15), 2**15 - 1, 3, -4]),
    "INT32": ("int_contents", np.int32, [-(2**31), 2**31 - 1, 5, -6]),
    "INT64": ("int64_contents", np.int64, [-(2**63), 2**63 - 1, 2**40, -7]),
    "UINT8": ("uint_contents", np.uint8, [0, 255, 1, 2]),
    "UINT16": ("uint_contents", np.uint16, [0, 2**16 - 1, 3, 4]),
    "UINT32": ("uint_contents", np.uint32, [0, 2**32 - 1, 5, 6]),
    "UINT64": ("uint64_contents", np.uint64, [0, 2**64 - 1, 2**63, 7]),
    "FP32": ("fp32_contents", np.float32, [1.5, -0.0, 3.4028234663852886e38, 1e-45]),
    "FP64": ("fp64_contents", np.float64, [1e-300, -2.5, 1.7976931348623157e308, 0.1]),
    "BYTES": ("bytes_contents", np.object_, [b"a", b"", b"\xff\x00", "é".encode()]),
}


@pytest.fixture(scope="module")
def stub(net_server: ServerProcess) -> service_pb2_grpc.GRPCInferenceServiceStub:
    return service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(net_server.grpc_address))


def _typed_request(
    datatype: str, shape: list[int], values: list[Any], typed_outputs: bool = False
) -> Any:
    request = service_pb2.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name="t", datatype=datatype, shape=shape)
    getattr(tensor.contents, TYPED[datatype][0]).extend(values)
    if typed_outputs:
        request.parameters["typed_outputs"].bool_param = True
    return request


def _raw_array(response: Any, dtype: Any) -> np.ndarray:
    """The only output, read from ``raw_output_contents`` as tritonclient reads it."""
    assert not _only_output(response).contents.ListFields()
    (raw,) = response.raw_output_contents
    if dtype is np.object_:
        return deserialize_bytes_tensor(raw)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))


def _only_output(response: Any) -> Any:
    assert len(response.outputs) == 1
    return response.outputs[0]


@pytest.mark.parametrize("datatype", sorted(TYPED))
@pytest.mark.parametrize("shape", [[4], [2, 2], [1, 2, 2]])
def test_typed_in_raw_out(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str, shape: list[int]
) -> None:
    _, dtype, values = TYPED[datatype]
    response = stub.ModelInfer(_typed_request(datatype, shape, values))
    output = _only_output(response)
    assert (output.name, output.datatype, list(output.shape)) == ("t", datatype, shape)
    np.testing.assert_array_equal(_raw_array(response, dtype), np.array(values, dtype=dtype))


@pytest.mark.parametrize("datatype", sorted(TYPED))
@pytest.mark.parametrize("shape", [[4], [2, 2], [1, 2, 2]])
def test_typed_outputs_on_request(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str, shape: list[int]
) -> None:
    field, dtype, values = TYPED[datatype]
    response = stub.ModelInfer(_typed_request(datatype, shape, values, typed_outputs=True))
    assert not response.raw_output_contents
    output = _only_output(response)
    assert (output.name, output.datatype, list(output.shape)) == ("t", datatype, shape)
    got = list(getattr(output.contents, field))
    expected = np.array(values, dtype=dtype).tolist()
    assert got == expected
    assert [type(v) for v in got] == [type(v) for v in expected]


@pytest.mark.parametrize("count", [0, 1, 32, 33, 100_000])
@pytest.mark.parametrize("datatype", ["FP32", "FP64", "INT64", "UINT8", "BOOL"])
def test_typed_sizes(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str, count: int
) -> None:
    """Sizes below, at and above the switch between the small and the large decoder."""
    field, dtype, _ = TYPED[datatype]
    rng = np.random.default_rng(count)
    values = rng.integers(0, 2 if datatype == "BOOL" else 250, count).astype(dtype)
    if dtype in (np.float32, np.float64):
        values = (values / 7).astype(dtype)
    for typed in (False, True):
        request = _typed_request(datatype, [count], values.tolist(), typed_outputs=typed)
        response = stub.ModelInfer(request)
        output = _only_output(response)
        assert list(output.shape) == [count]
        got = (
            np.array(getattr(output.contents, field), dtype)
            if typed
            else _raw_array(response, dtype)
        )
        np.testing.assert_array_equal(got, values)


def test_typed_floats_keep_every_bit(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    """NaN, infinities, negative zero and subnormals come back bit for bit."""
    for datatype, dtype in (("FP32", np.float32), ("FP64", np.float64)):
        values = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1.0], dtype=dtype)
        response = stub.ModelInfer(_typed_request(datatype, [7], values.tolist()))
        assert _raw_array(response, dtype).tobytes() == values.tobytes()
        request = _typed_request(datatype, [7], values.tolist(), typed_outputs=True)
        response = stub.ModelInfer(request)
        field = TYPED[datatype][0]
        got = np.array(getattr(_only_output(response).contents, field), dtype=dtype)
        assert got.tobytes() == values.tobytes()


@pytest.mark.parametrize(
    ("datatype", "shape", "values", "message"),
    [
        ("INT8", [2], [1, 128], "out of range for INT8"),
        ("INT16", [1], [-(2**15) - 1], "out of range for INT16"),
        ("UINT8", [2], [0, 256], "out of range for UINT8"),
        ("UINT16", [1], [2**16], "out of range for UINT16"),
        ("FP32", [2, 2], [1.0, 2.0, 3.0], "expected 4 elements for shape [2, 2], got 3"),
        ("BOOL", [3], [True], "expected 3 elements"),
        ("BYTES", [1], [b"a", b"b"], "expected 1 elements"),
    ],
)
def test_bad_typed_input_is_invalid_argument(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
    datatype: str,
    shape: list[int],
    values: list[Any],
    message: str,
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(_typed_request(datatype, shape, values))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()
    assert "'t'" in info.value.details()


@pytest.mark.parametrize("value", ["string_param", "int64_param"])
def test_typed_outputs_must_be_a_bool(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, value: str
) -> None:
    request = _typed_request("INT32", [1], [1])
    setattr(request.parameters["typed_outputs"], value, "yes" if value == "string_param" else 1)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the typed_outputs parameter must be a bool" in info.value.details()


def test_raw_only_datatype_sent_typed_is_invalid_argument(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="h", datatype="FP16", shape=[1])
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FP16 needs raw_input_contents" in info.value.details()


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP16", np.array([[0.5, -1.5], [65504, np.inf]], dtype=np.float16)),
        ("FP32", np.arange(100_000, dtype=np.float32).reshape(100, 1000)),
        ("INT8", np.array([-128, 127], dtype=np.int8)),
        ("BOOL", np.array([[True], [False]])),
    ],
)
def test_raw_in_raw_out(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, datatype: str, array: np.ndarray
) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="r", datatype=datatype, shape=list(array.shape))
    request.raw_input_contents.append(array.astype(array.dtype.newbyteorder("<")).tobytes())
    response = stub.ModelInfer(request)
    output = _only_output(response)
    assert (output.datatype, list(output.shape)) == (datatype, list(array.shape))
    assert not output.contents.ListFields()
    assert response.raw_output_contents[0] == array.tobytes()


def test_raw_bytes_length_prefixed(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    elements = [b"x", b"", b"\x00\xff"]
    raw = b"".join(struct.pack("<I", len(e)) + e for e in elements)
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="s", datatype="BYTES", shape=[3])
    request.raw_input_contents.append(raw)
    response = stub.ModelInfer(request)
    assert response.raw_output_contents[0] == raw


def test_raw_of_the_wrong_length_is_invalid_argument(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="r", datatype="FP32", shape=[2])
    request.raw_input_contents.append(b"\x00" * 7)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "raw data has 7 bytes, expected 8" in info.value.details()
