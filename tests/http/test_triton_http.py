"""tritonclient.http against a real server, in JSON and in binary mode."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess

MODES = [pytest.param(False, id="json"), pytest.param(True, id="binary")]


@pytest.fixture(scope="module")
def client(net_server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(net_server.address)


def _input(name: str, array: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def test_health_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("scale")
    meta = client.get_server_metadata()
    assert meta["name"] == "mlserve"
    assert "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("scale")
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}]
    assert [o["name"] for o in model["outputs"]] == ["scaled", "total"]
    assert client.get_model_metadata("version", "2")["versions"] == ["1", "2"]


@pytest.mark.parametrize("binary", MODES)
@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("FP32", np.array([[1.5, -2.0], [3.25, 4.0]], dtype=np.float32)),
        ("FP16", np.array([0.5, 1.5, -2.0], dtype=np.float16)),
        ("FP64", np.array([1e-300, 2.5], dtype=np.float64)),
        ("INT64", np.array([[2**40, -3]], dtype=np.int64)),
        ("INT8", np.array([-128, 127], dtype=np.int8)),
        ("UINT8", np.array([0, 255, 7], dtype=np.uint8)),
        ("UINT32", np.array([2**32 - 1], dtype=np.uint32)),
        ("BOOL", np.array([True, False, True], dtype=np.bool_)),
        ("BYTES", np.array([b"a", b"bc", b"xyz"], dtype=np.object_)),
    ],
)
def test_datatypes_round_trip(
    client: httpclient.InferenceServerClient, binary: bool, datatype: str, array: np.ndarray
) -> None:
    outputs = [httpclient.InferRequestedOutput("t", binary_data=binary)]
    result = client.infer("echo", [_input("t", array, datatype, binary)], outputs=outputs)
    got = result.as_numpy("t")
    if datatype == "BYTES" and not binary:  # JSON carries BYTES as strings
        got = np.array([s.encode() for s in got.reshape(-1)], dtype=np.object_).reshape(got.shape)
    assert got.shape == array.shape
    assert result.get_output("t")["datatype"] == datatype
    np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize("binary", MODES)
def test_requested_outputs(client: httpclient.InferenceServerClient, binary: bool) -> None:
    x = np.array([[1, 2], [3, 4]], dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput("total", binary_data=binary)]
    result = client.infer("scale", [_input("x", x, "FP32", binary)], outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("total"), [3, 7])
    assert result.as_numpy("scaled") is None
    everything = client.infer("scale", [_input("x", x, "FP32", binary)])
    np.testing.assert_array_equal(everything.as_numpy("scaled"), x * 3)


@pytest.mark.parametrize("binary", MODES)
def test_versioned_models(client: httpclient.InferenceServerClient, binary: bool) -> None:
    x = np.zeros(2, dtype=np.float32)
    for version, expected in (("1", 1), ("2", 2), ("", 2)):
        result = client.infer("version", [_input("x", x, "FP32", binary)], model_version=version)
        np.testing.assert_array_equal(result.as_numpy("output-0"), [expected, expected])


@pytest.mark.parametrize("binary", MODES)
def test_unknown_model_is_404(client: httpclient.InferenceServerClient, binary: bool) -> None:
    x = np.zeros(2, dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        client.infer("nope", [_input("x", x, "FP32", binary)])
    assert info.value.status() == "404"
    assert "nope" in info.value.message()


@pytest.mark.parametrize("binary", MODES)
def test_malformed_input_is_400(client: httpclient.InferenceServerClient, binary: bool) -> None:
    wrong_shape = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        client.infer("scale", [_input("x", wrong_shape, "FP32", binary)])
    assert info.value.status() == "400"
    assert "'x'" in info.value.message()


def test_statistics_and_repository(client: httpclient.InferenceServerClient) -> None:
    x = np.zeros((1, 2), dtype=np.float32)
    client.infer("scale", [_input("x", x, "FP32", True)])
    stats = client.get_inference_statistics("scale")["model_stats"]
    assert stats[0]["name"] == "scale" and stats[0]["inference_count"] >= 1
    assert stats[0]["inference_stats"]["success"]["count"] == stats[0]["inference_count"]
    index = {(e["name"], e["version"]): e["state"] for e in client.get_model_repository_index()}
    assert index[("version", "1")] == "READY"
    assert client.get_model_config("scale")["input"] == [
        {"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 2]}
    ]


def test_async_client_reads_every_answer(net_server: ServerProcess) -> None:
    """tritonclient's asyncio client: aiohttp asks for gzip on every request, and the
    client inflates inference answers alone, so only those may come compressed."""

    async def calls() -> None:
        client = aioclient.InferenceServerClient(net_server.address)
        try:
            x = np.array([[1, 2], [3, 4]], dtype=np.float32)
            for algorithm in ("gzip", "deflate", None):
                for binary in (False, True):
                    tensor = aioclient.InferInput("x", list(x.shape), "FP32")
                    tensor.set_data_from_numpy(x, binary_data=binary)
                    result = await client.infer(
                        "scale", [tensor], response_compression_algorithm=algorithm
                    )
                    np.testing.assert_array_equal(result.as_numpy("scaled"), x * 3)
            stats = (await client.get_inference_statistics("scale"))["model_stats"]
            assert stats[0]["name"] == "scale" and stats[0]["inference_count"] >= 6
            model = await client.get_model_metadata("scale")
            assert [o["name"] for o in model["outputs"]] == ["scaled", "total"]
            config = await client.get_model_config("scale")
            assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 2]}]
            index = await client.get_model_repository_index()
            assert ("version", "1", "READY") in {
                (e["name"], e["version"], e["state"]) for e in index
            }
            assert (await client.get_server_metadata())["name"] == "mlserve"
            with pytest.raises(InferenceServerException) as info:  # an error reads too
                await client.infer("nope", [tensor], response_compression_algorithm="gzip")
            assert info.value.status() == "404"
            assert "nope" in info.value.message()
        finally:
            await client.close()

    asyncio.run(calls())
