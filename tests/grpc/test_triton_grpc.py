"""tritonclient.grpc against a real server: raw contents both ways, typed contents in."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess


@pytest.fixture(scope="module")
def client(net_server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(net_server.grpc_address)


def _input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def test_health_and_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("scale")
    assert client.is_model_ready("version", "1")
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "mlserve"
    # The REST list, as Triton's gRPC metadata gives it: each extension has its RPCs.
    assert "model_repository" in meta["extensions"]
    model = client.get_model_metadata("scale", as_json=True)
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "2"]}]
    assert client.get_model_metadata("version", "2", as_json=True)["versions"] == ["1", "2"]


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP32", np.array([[1.5, -2.0], [3.25, 4.0]], dtype=np.float32)),
        ("FP16", np.array([0.5, 1.5, -2.0], dtype=np.float16)),
        ("FP64", np.array([1e-300, 2.5], dtype=np.float64)),
        ("INT64", np.array([[2**40, -3]], dtype=np.int64)),
        ("INT32", np.array([-(2**31), 5], dtype=np.int32)),
        ("UINT8", np.array([0, 255, 7], dtype=np.uint8)),
        ("UINT64", np.array([2**64 - 1], dtype=np.uint64)),
        ("BOOL", np.array([True, False, True], dtype=np.bool_)),
        ("BYTES", np.array([b"a", b"", b"\xff\x00"], dtype=np.object_)),
    ],
)
def test_datatypes_round_trip(
    client: grpcclient.InferenceServerClient, datatype: str, array: np.ndarray
) -> None:
    result = client.infer("echo", [_input("t", array, datatype)])
    assert result.get_output("t").datatype == datatype
    got = result.as_numpy("t")
    assert got.shape == array.shape
    np.testing.assert_array_equal(got, array)


def test_requested_outputs_and_id(client: grpcclient.InferenceServerClient) -> None:
    x = np.array([[1, 2], [3, 4]], dtype=np.float32)
    outputs = [grpcclient.InferRequestedOutput("total")]
    result = client.infer("scale", [_input("x", x, "FP32")], outputs=outputs, request_id="r-1")
    np.testing.assert_array_equal(result.as_numpy("total"), [3, 7])
    assert result.as_numpy("scaled") is None
    assert result.get_response().id == "r-1"


def test_versioned_models(client: grpcclient.InferenceServerClient) -> None:
    x = np.zeros(3, dtype=np.float32)
    for version, expected in (("1", 1), ("2", 2), ("", 2)):
        result = client.infer("version", [_input("x", x, "FP32")], model_version=version)
        np.testing.assert_array_equal(result.as_numpy("output-0"), [expected] * 3)
        assert result.get_response().model_version == str(expected)


def test_unknown_model_is_not_found(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("nope", [_input("x", np.zeros(2, dtype=np.float32), "FP32")])
    assert info.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("nope")
    assert info.value.status() == "StatusCode.NOT_FOUND"


def test_malformed_input_is_invalid_argument(client: grpcclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("scale", [_input("x", np.zeros((2, 3), dtype=np.float32), "FP32")])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'x'" in info.value.message()


def _stub(net_server: ServerProcess) -> service_pb2_grpc.GRPCInferenceServiceStub:
    return service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(net_server.grpc_address))


@pytest.mark.parametrize(
    ("datatype", "field", "array"),
    [
        ("INT32", "int_contents", np.array([[1, -2, 2**31 - 1]], dtype=np.int32)),
        ("INT8", "int_contents", np.array([-128, 0, 127], dtype=np.int8)),
        ("BYTES", "bytes_contents", np.array([b"a", b"", "é".encode()], dtype=np.object_)),
    ],
)
def test_typed_contents_in_raw_contents_out(
    net_server: ServerProcess, datatype: str, field: str, array: np.ndarray
) -> None:
    """Triton's grpc_explicit_*_content_client examples: typed contents in, the answer
    read from raw_output_contents (as Triton answers whatever the request's form)."""
    request = service_pb2.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name="t", datatype=datatype, shape=list(array.shape))
    getattr(tensor.contents, field).extend(array.reshape(-1).tolist())
    response = _stub(net_server).ModelInfer(request)
    assert len(response.raw_output_contents) == 1
    assert not response.outputs[0].contents.ListFields()
    np.testing.assert_array_equal(grpcclient.InferResult(response).as_numpy("t"), array)


def test_stream_answers_typed_contents_raw(net_server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="t", datatype="INT32", shape=[2]).contents.int_contents.extend([7, -7])
    (answer,) = _stub(net_server).ModelStreamInfer(iter([request]), timeout=30)
    result = grpcclient.InferResult(answer.infer_response)
    np.testing.assert_array_equal(result.as_numpy("t"), np.array([7, -7], dtype=np.int32))


def test_async_client_reads_every_answer(net_server: ServerProcess) -> None:
    import tritonclient.grpc.aio as aioclient

    async def calls() -> None:
        client = aioclient.InferenceServerClient(net_server.grpc_address)
        try:
            x = np.array([[1, 2]], dtype=np.float32)
            tensor = aioclient.InferInput("x", [1, 2], "FP32")
            tensor.set_data_from_numpy(x)
            result = await client.infer("scale", [tensor])
            np.testing.assert_array_equal(result.as_numpy("scaled"), x * 3)
            stats = await client.get_inference_statistics("scale", as_json=True)
            assert stats["model_stats"][0]["name"] == "scale"
            model = await client.get_model_metadata("scale", as_json=True)
            assert [o["name"] for o in model["outputs"]] == ["scaled", "total"]
            config = await client.get_model_config("scale", as_json=True)
            assert config["config"]["input"][0]["name"] == "x"
            index = await client.get_model_repository_index(as_json=True)
            assert any(e["name"] == "scale" for e in index["models"])
        finally:
            await client.close()

    asyncio.run(calls())


def test_typed_outputs_on_request(net_server: ServerProcess) -> None:
    """The ``typed_outputs`` request parameter asks for typed contents back."""
    request = service_pb2.ModelInferRequest(model_name="scale")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    tensor.contents.fp32_contents.extend([1.0, 2.0])
    request.parameters["typed_outputs"].bool_param = True
    response = _stub(net_server).ModelInfer(request)
    assert not response.raw_output_contents
    by_name = {o.name: o for o in response.outputs}
    assert list(by_name["scaled"].contents.fp32_contents) == [3.0, 6.0]
    assert list(by_name["total"].shape) == [1]
    request.parameters["typed_outputs"].bool_param = False
    response = _stub(net_server).ModelInfer(request)
    assert len(response.raw_output_contents) == 2


def test_raw_contents_count_must_match_inputs(net_server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="echo")
    request.inputs.add(name="a", datatype="UINT8", shape=[1])
    request.inputs.add(name="b", datatype="UINT8", shape=[1])
    request.raw_input_contents.append(b"\x01")
    with pytest.raises(grpc.RpcError) as info:
        _stub(net_server).ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
