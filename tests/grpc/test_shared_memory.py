"""System shared memory over gRPC (docs/protocol.md#system-shared-memory): tritonclient's
calls of Triton's simple_grpc_shm_client.py and simple_grpc_shm_string_client.py
against a real server of examples/triton_models.py, and the codes of bad requests."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.netserver import ServerProcess, start_server
from tests.triton_shm import region, shm_module

shm = shm_module()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    served = start_server("--model-control-mode", "explicit", target="examples/triton_models.py")
    yield served
    served.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    yield client
    client.unregister_system_shared_memory()


def _status_code(call: object, *args: object) -> str:
    with pytest.raises(InferenceServerException) as info:
        call(*args)  # type: ignore[operator]
    return str(info.value.status())


def test_simple_reads_inputs_and_writes_outputs_in_regions(
    client: grpcclient.InferenceServerClient,
) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    with region(shm, 128) as (out, out_key), region(shm, 128) as (into, in_key):
        client.register_system_shared_memory("output_data", out_key, 128)
        shm.set_shared_memory_region(into, [a])
        shm.set_shared_memory_region(into, [b], offset=64)
        client.register_system_shared_memory("input_data", in_key, 128)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
            grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("input_data", 64)
        inputs[1].set_shared_memory("input_data", 64, offset=64)
        outputs = [
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ]
        outputs[0].set_shared_memory("output_data", 64)
        outputs[1].set_shared_memory("output_data", 64, offset=64)
        results = client.infer("simple", inputs, outputs=outputs)
        first = results.get_output("OUTPUT0")
        assert first.parameters["shared_memory_region"].string_param == "output_data"
        total = shm.get_contents_as_numpy(out, np.int32, list(first.shape))
        second = results.get_output("OUTPUT1")
        difference = shm.get_contents_as_numpy(out, np.int32, list(second.shape), offset=64)
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(difference, a - b)
        status = client.get_system_shared_memory_status(as_json=True)["regions"]
        assert status["input_data"] == {"name": "input_data", "key": in_key, "byte_size": "128"}
        assert set(status) == {"input_data", "output_data"}
        one = client.get_system_shared_memory_status("output_data", as_json=True)
        assert list(one["regions"]) == ["output_data"]
        client.unregister_system_shared_memory("input_data")
        assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == [
            "output_data"
        ]


def test_simple_string_through_regions(client: grpcclient.InferenceServerClient) -> None:
    a = np.array([str(x).encode() for x in range(16)], dtype=np.object_).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=np.object_).reshape(1, 16)
    a_serialized, b_serialized = serialize_byte_tensor(a), serialize_byte_tensor(b)
    a_size, b_size = len(a_serialized.item()), len(b_serialized.item())
    with (
        region(shm, a_size) as (in0, key0),
        region(shm, b_size) as (in1, key1),
        region(shm, 128) as (out0, okey0),
    ):
        shm.set_shared_memory_region(in0, [a_serialized])
        shm.set_shared_memory_region(in1, [b_serialized])
        client.register_system_shared_memory("input0_data", key0, a_size)
        client.register_system_shared_memory("input1_data", key1, b_size)
        client.register_system_shared_memory("output0_data", okey0, 128)
        inputs = [
            grpcclient.InferInput("INPUT0", [1, 16], "BYTES"),
            grpcclient.InferInput("INPUT1", [1, 16], "BYTES"),
        ]
        inputs[0].set_shared_memory("input0_data", a_size)
        inputs[1].set_shared_memory("input1_data", b_size)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("output0_data", 128)
        client.infer("simple_string", inputs, outputs=[output])
        total = shm.get_contents_as_numpy(out0, np.object_, [1, 16])
        assert [int(x) for x in total.ravel()] == [x + 1 for x in range(16)]


def test_bad_requests_are_invalid_argument(client: grpcclient.InferenceServerClient) -> None:
    register = client.register_system_shared_memory
    assert _status_code(register, "r", "/mlserve-no-such-key", 8) == "StatusCode.INVALID_ARGUMENT"
    with region(shm, 64) as (_, key):
        assert _status_code(register, "r", key, 128) == "StatusCode.INVALID_ARGUMENT"
        assert _status_code(register, "a/b", key, 8) == "StatusCode.INVALID_ARGUMENT"
        register("r", key, 64)
        assert _status_code(register, "r", key, 8) == "StatusCode.INVALID_ARGUMENT"
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_shared_memory("r", 64, offset=8)  # 8 + 64 bytes of a 64-byte region
        other = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
        other.set_data_from_numpy(np.zeros((1, 16), dtype=np.int32))
        infer = client.infer
        assert _status_code(infer, "simple", [tensor, other]) == "StatusCode.INVALID_ARGUMENT"
        status = client.get_system_shared_memory_status
        assert _status_code(status, "nope") == "StatusCode.INVALID_ARGUMENT"
    cuda = client.register_cuda_shared_memory
    assert _status_code(cuda, "g", b"", 0, 8) == "StatusCode.UNIMPLEMENTED"
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    assert client.is_server_live()


def test_routes_need_model_control(net_server: ServerProcess) -> None:
    """The session's server runs without explicit model control: PERMISSION_DENIED."""
    client = grpcclient.InferenceServerClient(net_server.grpc_address)
    status = client.get_system_shared_memory_status
    assert _status_code(status) == "StatusCode.PERMISSION_DENIED"
