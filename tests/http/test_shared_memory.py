"""System shared memory over REST (docs/protocol.md#system-shared-memory): tritonclient's
calls of Triton's simple_http_shm_client.py and simple_http_shm_string_client.py
against a real server of examples/triton_models.py, the checks that make every bad
region, offset and size a 400, and the mock server's bookkeeping."""

from __future__ import annotations

import importlib.util
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from mlserve.core.settings import FaceSettings
from mlserve.function.function import new_function
from mlserve.server.auth import authorize
from tests.netserver import ServerProcess, start_server
from tests.triton_shm import region, shm_module

shm = shm_module()
TRITON_MODELS = "examples/triton_models.py"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    served = start_server("--model-control-mode", "explicit", target=TRITON_MODELS)
    yield served
    served.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.address)
    yield client
    client.unregister_system_shared_memory()  # every test leaves none behind


def _post(server: ServerProcess, path: str, body: object) -> tuple[int, Any]:
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_simple_reads_inputs_and_writes_outputs_in_regions(
    client: httpclient.InferenceServerClient,
) -> None:
    """simple_http_shm_client.py's calls: one region holds both inputs, one both outputs."""
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
            httpclient.InferInput("INPUT0", [1, 16], "INT32"),
            httpclient.InferInput("INPUT1", [1, 16], "INT32"),
        ]
        inputs[0].set_shared_memory("input_data", 64)
        inputs[1].set_shared_memory("input_data", 64, offset=64)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        ]
        outputs[0].set_shared_memory("output_data", 64)
        outputs[1].set_shared_memory("output_data", 64, offset=64)
        results = client.infer("simple", inputs, outputs=outputs)
        first = results.get_output("OUTPUT0")
        assert first["parameters"] == {
            "shared_memory_region": "output_data",
            "shared_memory_byte_size": 64,
        }
        assert "data" not in first  # the data is in the region, not in the answer
        total = shm.get_contents_as_numpy(out, np.int32, first["shape"])
        second = results.get_output("OUTPUT1")
        difference = shm.get_contents_as_numpy(out, np.int32, second["shape"], offset=64)
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(difference, a - b)
        status = client.get_system_shared_memory_status()
        assert sorted(status, key=lambda r: r["name"]) == [
            {"name": "input_data", "key": in_key, "offset": 0, "byte_size": 128},
            {"name": "output_data", "key": out_key, "offset": 0, "byte_size": 128},
        ]
        assert client.get_system_shared_memory_status("input_data")[0]["key"] == in_key
        client.unregister_system_shared_memory("input_data")
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["output_data"]
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status() == []


def test_simple_string_through_regions(client: httpclient.InferenceServerClient) -> None:
    """simple_http_shm_string_client.py's calls: BYTES tensors, one region each."""
    a = np.array([str(x).encode() for x in range(16)], dtype=np.object_).reshape(1, 16)
    b = np.array([b"1"] * 16, dtype=np.object_).reshape(1, 16)
    a_serialized, b_serialized = serialize_byte_tensor(a), serialize_byte_tensor(b)
    a_bytes, b_bytes = a_serialized.item(), b_serialized.item()
    with (
        region(shm, len(a_bytes)) as (in0, key0),
        region(shm, len(b_bytes)) as (in1, key1),
        region(shm, 128) as (out0, okey0),
        region(shm, 128) as (out1, okey1),
    ):
        shm.set_shared_memory_region(in0, [a_serialized])
        shm.set_shared_memory_region(in1, [b_serialized])
        client.register_system_shared_memory("input0_data", key0, len(a_bytes))
        client.register_system_shared_memory("input1_data", key1, len(b_bytes))
        client.register_system_shared_memory("output0_data", okey0, 128)
        client.register_system_shared_memory("output1_data", okey1, 128)
        inputs = [
            httpclient.InferInput("INPUT0", [1, 16], "BYTES"),
            httpclient.InferInput("INPUT1", [1, 16], "BYTES"),
        ]
        inputs[0].set_shared_memory("input0_data", len(a_bytes))
        inputs[1].set_shared_memory("input1_data", len(b_bytes))
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        ]
        outputs[0].set_shared_memory("output0_data", 128)
        outputs[1].set_shared_memory("output1_data", 128)
        results = client.infer("simple_string", inputs, outputs=outputs)
        total = shm.get_contents_as_numpy(out0, np.object_, [1, 16])
        difference = shm.get_contents_as_numpy(out1, np.object_, [1, 16])
        assert results.get_output("OUTPUT0")["datatype"] == "BYTES"
        assert [int(x) for x in total.ravel()] == [x + 1 for x in range(16)]
        assert [int(x) for x in difference.ravel()] == [x - 1 for x in range(16)]


def test_bad_regions_offsets_and_sizes_are_400(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    with region(shm, 64) as (_, key):
        register = "/v2/systemsharedmemory/region/{}/register"
        refused = {
            "a key that does not exist": ("r", {"key": "/mlserve-no-such-key", "byte_size": 8}),
            "a key outside /dev/shm": ("r", {"key": "/../etc/passwd", "byte_size": 8}),
            "a size past the object": ("r", {"key": key, "byte_size": 128}),
            "an offset past the object": ("r", {"key": key, "offset": 60, "byte_size": 8}),
            "no byte size": ("r", {"key": key}),
            "a negative offset": ("r", {"key": key, "offset": -1, "byte_size": 8}),
        }
        for what, (name, body) in refused.items():
            status, answer = _post(server, register.format(name), body)
            assert status == 400, (what, answer)
        client.register_system_shared_memory("small", key, 32, offset=16)
        status, answer = _post(server, register.format("small"), {"key": key, "byte_size": 8})
        assert (status, "already registered" in answer["error"]) == (400, True)

        def infer(place: dict[str, Any] | None, output: dict[str, Any] | None = None) -> int:
            tensor = {"datatype": "INT32", "shape": [1, 16]}
            second = {"parameters": place} if place else {"data": list(range(16))}
            inputs = [
                {"name": "INPUT0", **tensor, "data": list(range(16))},
                {"name": "INPUT1", **tensor, **second},
            ]
            body: dict[str, Any] = {"inputs": inputs}
            if output is not None:
                body["outputs"] = [{"name": "OUTPUT0", "parameters": output}]
            return _post(server, "/v2/models/simple/infer", body)[0]

        inside = {"shared_memory_region": "small", "shared_memory_byte_size": 32}
        assert infer({**inside, "shared_memory_byte_size": 64}) == 400  # past the region
        assert infer({**inside, "shared_memory_offset": 8}) == 400  # offset + size past it
        assert infer({**inside, "shared_memory_region": "nope"}) == 400  # never registered
        assert infer({**inside, "shared_memory_byte_size": 16}) == 400  # too few for [1, 16]
        assert infer({**inside, "shared_memory_byte_size": "32"}) == 400  # not a number
        assert infer({"shared_memory_region": "small"}) == 400  # no byte size
        assert infer(None, {**inside, "shared_memory_byte_size": 8}) == 400  # output too big
        assert infer(None, {**inside, "shared_memory_offset": 16}) == 400  # output past it
        assert infer(None, inside) == 400  # 64 bytes of output for a 32-byte region
        status, answer = _post(server, "/v2/systemsharedmemory/region/small/unregister", {})
        assert status == 200
        with pytest.raises(InferenceServerException, match="unable to find"):
            client.get_system_shared_memory_status("small")
        assert client.is_server_live()


def test_cuda_shared_memory_holds_no_regions(
    server: ServerProcess, client: httpclient.InferenceServerClient
) -> None:
    assert client.get_cuda_shared_memory_status() == []
    client.unregister_cuda_shared_memory()
    register = "/v2/cudasharedmemory/region/g/register"
    status, _ = _post(server, register, {"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8})
    assert status == 501


def test_routes_need_model_control(net_server: ServerProcess) -> None:
    """The session's server runs without --model-control-mode explicit: 403."""
    client = httpclient.InferenceServerClient(net_server.address)
    with pytest.raises(InferenceServerException, match="model-control-mode"):
        client.get_system_shared_memory_status()
    with region(shm, 64) as (_, key):
        with pytest.raises(InferenceServerException, match="model-control-mode"):
            client.register_system_shared_memory("r", key, 64)


def test_routes_need_an_admin_token_when_authentication_is_on() -> None:
    settings = FaceSettings(auth_tokens=("user",), admin_tokens=("admin",))
    path = "/v2/systemsharedmemory/region/r/register"
    refused = authorize(settings, path, "Bearer user")
    assert refused is not None and refused.status_code == 403
    assert authorize(settings, path, "Bearer admin") is None
    assert authorize(settings, "/v2/cudasharedmemory/status", "Bearer user") is not None


def test_regions_are_unmapped_at_shutdown_and_never_reach_the_model() -> None:
    """A model sees a copy of its input: an unload or unregister leaves it no reference."""
    spec = importlib.util.spec_from_file_location("triton_models", TRITON_MODELS)
    assert spec is not None and spec.loader is not None
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    fn = new_function("shm")
    fn.add_model("simple", class_name=models.AddSub)
    server = fn.to_mock_server(model_control=True)
    with region(shm, 128) as (handle, key):
        shm.set_shared_memory_region(handle, [np.full((1, 16), 3, dtype=np.int32)])
        register = {"key": key, "byte_size": 128}
        server.test("/v2/systemsharedmemory/region/r/register", register, method="POST")
        place = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
        tensor = {"datatype": "INT32", "shape": [1, 16], "parameters": place}
        body = {"inputs": [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}]}
        answer = server.test("/v2/models/simple/infer", body)
        assert answer["outputs"][0]["data"] == [6] * 16
        assert len(server.shared_memory) == 1
        server.wait_for_completion()  # as at shutdown
        assert len(server.shared_memory) == 0
        assert server.test("/v2/systemsharedmemory/status", method="GET") == []
