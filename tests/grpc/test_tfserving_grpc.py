"""TF Serving's PredictionService on the V2 gRPC port, called by unmodified TF Serving
client code (channel, stub, ``tf.make_tensor_proto``, a timeout, ``tf.make_ndarray``)
on the V2 models of tests/http/fn.py: any V2ModelServer answers Predict and metadata."""

from __future__ import annotations

import os

import grpc
import numpy as np
import pytest

from tests.netserver import ServerProcess

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")
from tensorflow_serving.apis import (  # noqa: E402
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

TIMEOUT = 30.0  # the first Predict imports TensorFlow in the server


@pytest.fixture(scope="module")
def stub(net_server: ServerProcess):
    channel = grpc.insecure_channel(net_server.grpc_address)
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def predict(stub, model: str, inputs: dict, **spec) -> predict_pb2.PredictResponse:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    for key, value in spec.items():
        if key == "version":
            request.model_spec.version.value = value
        elif key == "output_filter":
            request.output_filter.extend(value)
        else:
            setattr(request.model_spec, key, value)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(value)
    return stub.Predict(request, TIMEOUT)


def test_a_v2_model_answers_predict_as_tf_serving_does(stub) -> None:
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    result = predict(stub, "scale", {"x": tf.make_tensor_proto(x)})
    assert sorted(result.outputs) == ["scaled", "total"]
    np.testing.assert_allclose(tf.make_ndarray(result.outputs["scaled"]), x * 3)
    np.testing.assert_allclose(tf.make_ndarray(result.outputs["total"]), x.sum(axis=1))
    # written in the typed fields, not tensor_content
    assert list(result.outputs["total"].float_val) == [3.0, 7.0]
    assert not result.outputs["total"].tensor_content
    assert result.model_spec.name == "scale"
    assert result.model_spec.signature_name == "serving_default"


@pytest.mark.parametrize(
    "dtype",
    ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint16"]
    + ["uint32", "uint64", "bool"],
)
def test_every_dtype_round_trips_from_tensor_content_and_typed_fields(stub, dtype) -> None:
    values = np.array([[0, 1, 2], [3, 4, 5]]).astype(dtype)
    packed = tf.make_tensor_proto(values)  # tensor_content
    typed = tf.make_tensor_proto(values)
    typed.ClearField("tensor_content")
    field = {
        "float32": "float_val",
        "float64": "double_val",
        "int64": "int64_val",
        "uint32": "uint32_val",
        "uint64": "uint64_val",
        "bool": "bool_val",
    }.get(dtype, "int_val")
    if dtype == "float16":
        field, listed = "half_val", values.view(np.uint16).ravel().tolist()
    else:
        listed = values.ravel().tolist()
    typed.ClearField(field)
    getattr(typed, field).extend(listed)
    for proto in (packed, typed):
        result = predict(stub, "echo", {"v": proto})
        out = result.outputs["v"]
        assert out.dtype == proto.dtype
        assert getattr(out, field), f"{dtype} output not in {field}"
        back = tf.make_ndarray(out)
        assert back.dtype == values.dtype and back.shape == values.shape
        np.testing.assert_array_equal(back, values)


def test_string_tensors_and_a_broadcast_scalar(stub) -> None:
    words = np.array([b"caf\xc3\xa9", b"\x00\xff"], dtype=object)
    result = predict(stub, "echo", {"s": tf.make_tensor_proto(words)})
    assert list(result.outputs["s"].string_val) == list(words)
    filled = tf.make_tensor_proto(7, dtype=tf.int32, shape=[2, 2])  # one value, four elements
    result = predict(stub, "echo", {"f": filled})
    np.testing.assert_array_equal(tf.make_ndarray(result.outputs["f"]), np.full((2, 2), 7))


def test_versions_and_output_filter(stub) -> None:
    one = tf.make_tensor_proto(np.array([1.0], np.float32))
    for version in (1, 2):
        result = predict(stub, "version", {"inputs": one}, version=version)
        assert tf.make_ndarray(result.outputs[next(iter(result.outputs))]).tolist() == [version]
        assert result.model_spec.version.value == version
    x = tf.make_tensor_proto(np.ones((1, 2), np.float32))
    result = predict(stub, "scale", {"x": x}, output_filter=["total"])
    assert list(result.outputs) == ["total"]


@pytest.mark.parametrize(
    ("model", "inputs", "spec", "code", "message"),
    [
        ("nope", {}, {}, "NOT_FOUND", "Servable not found for request: Latest(nope)"),
        ("version", {}, {"version": 9}, "NOT_FOUND", "Specific(version, 9)"),
        ("scale", {}, {"signature_name": "other"}, "FAILED_PRECONDITION", 'key "other" not found'),
        (
            "scale",
            {"y": 1},
            {},
            "INVALID_ARGUMENT",
            "input tensor alias not found in signature: y. Inputs expected to be in the set {x}.",
        ),
        (
            "scale",
            {},
            {},
            "INVALID_ARGUMENT",
            "input size does not match signature: 0!=1 len({}) != len({x}). "
            "Sent extra: {}. Missing but required: {x}.",
        ),
        (
            "scale",
            {"x": 1},
            {"output_filter": ["z"]},
            "INVALID_ARGUMENT",
            "output tensor alias not found in signature: z Outputs expected to be in the set "
            "{scaled,total}.",
        ),
        ("scale", {"x": 1}, {"output_filter": ["total", "total"]}, "INVALID_ARGUMENT", "duplicate"),
        ("scale", {"x": "text"}, {}, "INVALID_ARGUMENT", "x"),
        ("version", {}, {"version_label": "stable"}, "INVALID_ARGUMENT", "Unrecognized servable"),
        ("nope", {}, {"version_label": "stable"}, "NOT_FOUND", "Labeled(nope, stable)"),
    ],
)
def test_errors_have_tf_serving_codes_and_messages(stub, model, inputs, spec, code, message):
    protos = {
        name: tf.make_tensor_proto(np.array([[value, value]], np.float32))
        if isinstance(value, int)
        else tf.make_tensor_proto([[value, value]])
        for name, value in inputs.items()
    }
    with pytest.raises(grpc.RpcError) as error:
        predict(stub, model, protos, **spec)
    assert error.value.code() == getattr(grpc.StatusCode, code)
    assert message in error.value.details()


def test_unserved_dtypes_are_invalid_argument(stub) -> None:
    proto = tf.make_tensor_proto(np.array([1 + 2j], np.complex64))
    with pytest.raises(grpc.RpcError) as error:
        predict(stub, "echo", {"c": proto})
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "DT_COMPLEX64" in error.value.details()


def test_metadata_is_a_predict_signature_in_a_signature_def_map(stub) -> None:
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "scale"
    request.metadata_field.append("signature_def")
    result = stub.GetModelMetadata(request, TIMEOUT)
    defs = get_model_metadata_pb2.SignatureDefMap()
    result.metadata["signature_def"].Unpack(defs)
    signature = defs.signature_def["serving_default"]
    assert signature.method_name == "tensorflow/serving/predict"
    assert signature.inputs["x"].dtype == tf.float32.as_datatype_enum
    assert [d.size for d in signature.inputs["x"].tensor_shape.dim] == [-1, 2]
    assert sorted(signature.outputs) == ["scaled", "total"]
    request.metadata_field[:] = ["other"]
    with pytest.raises(grpc.RpcError) as error:
        stub.GetModelMetadata(request, TIMEOUT)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_model_status_and_reload_without_model_control(net_server: ServerProcess) -> None:
    with grpc.insecure_channel(net_server.grpc_address) as channel:
        models = model_service_pb2_grpc.ModelServiceStub(channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "version"
        status = models.GetModelStatus(request, TIMEOUT)
        assert [(s.version, s.state) for s in status.model_version_status] == [
            (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE),
            (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE),
        ]
        request.model_spec.name = "nope"
        with pytest.raises(grpc.RpcError) as error:
            models.GetModelStatus(request, TIMEOUT)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        assert error.value.details() == "Could not find any versions of model nope"
        with pytest.raises(grpc.RpcError) as error:
            models.HandleReloadConfigRequest(model_management_pb2.ReloadConfigRequest(), TIMEOUT)
        assert error.value.code() == grpc.StatusCode.PERMISSION_DENIED


WITHOUT_TFS = """
import asyncio, sys
sys.modules["tensorflow_serving"] = None  # as if tensorflow-serving-api were not installed
import grpc
import mlserve
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.grpc.service import start_grpc_server

fn = mlserve.new_function("plain")
fn.add_model("m", class_name=mlserve.V2ModelServer)
server = fn.to_mock_server()

async def main():
    grpc_server = await start_grpc_server(server, "127.0.0.1", int(sys.argv[1]))
    async with grpc.aio.insecure_channel("127.0.0.1:" + sys.argv[1]) as channel:
        live = channel.unary_unary(
            "/inference.GRPCInferenceService/ServerLive",
            request_serializer=pb.ServerLiveRequest.SerializeToString,
            response_deserializer=pb.ServerLiveResponse.FromString,
        )
        print("live", (await live(pb.ServerLiveRequest(), timeout=10)).live)
        predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
        try:
            await predict(b"", timeout=10)
        except grpc.aio.AioRpcError as error:
            print("tfs", error.code().name)
    await grpc_server.stop(0)
    print("tensorflow imported", "tensorflow" in sys.modules)

asyncio.run(main())
"""


def test_without_tensorflow_serving_api_v2_grpc_serves_and_says_what_to_install() -> None:
    import subprocess
    import sys

    from tests.netserver import ROOT
    from tests.services import free_port

    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_TFS, str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [
        "live True",
        "tfs UNIMPLEMENTED",
        "tensorflow imported False",
    ]
    assert "pip install --no-deps tensorflow-serving-api" in out.stderr


LAZY = """
import asyncio, sys
import grpc
import mlserve
from mlserve.grpc.service import start_grpc_server

fn = mlserve.new_function("plain")
fn.add_model("m", class_name=mlserve.V2ModelServer)
server = fn.to_mock_server()

async def main():
    grpc_server = await start_grpc_server(server, "127.0.0.1", int(sys.argv[1]))
    print("tensorflow imported at start", "tensorflow" in sys.modules)
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    async with grpc.aio.insecure_channel("127.0.0.1:" + sys.argv[1]) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "m"
        for _ in range(2):  # the first call loads the services, the second finds them
            answer = await stub.GetModelStatus(request, timeout=60)
            print("status", [v.state for v in answer.model_version_status])
    await grpc_server.stop(0)

asyncio.run(main())
"""


def test_tf_serving_services_load_on_their_first_call() -> None:
    """A gRPC port imports TensorFlow only when a TF Serving client calls."""
    import subprocess
    import sys

    from tests.netserver import ROOT
    from tests.services import free_port

    out = subprocess.run(
        [sys.executable, "-c", LAZY, str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [
        "tensorflow imported at start False",
        "status [30]",
        "status [30]",
    ]


def test_bfloat16_inputs_are_served(stub) -> None:
    values = np.array([1.5, -2.0, 0.25], dtype=tf.bfloat16.as_numpy_dtype)
    result = predict(stub, "echo", {"b": tf.make_tensor_proto(values)})
    np.testing.assert_array_equal(tf.make_ndarray(result.outputs["b"]), [1.5, -2.0, 0.25])


def test_the_cli_serves_tf_serving_alone_on_tfs_grpc_port() -> None:
    from tests.netserver import start_server
    from tests.services import free_port, wait_for_port

    port = free_port()
    process = start_server("--tfs-grpc-port", str(port))
    try:
        wait_for_port(port, timeout=60, proc=process.proc)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            x = tf.make_tensor_proto(np.ones((1, 2), np.float32))
            result = predict(tfs, "scale", {"x": x})
            assert tf.make_ndarray(result.outputs["total"]).tolist() == [2.0]
            live = channel.unary_unary("/inference.GRPCInferenceService/ServerLive")
            with pytest.raises(grpc.RpcError) as error:
                live(b"", timeout=TIMEOUT)
            assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        process.stop()


def test_malformed_tensors_are_invalid_argument(stub) -> None:
    short = tf.make_tensor_proto(np.ones((2, 2), np.float32))
    short.tensor_content = short.tensor_content[:-4]  # 15 bytes for 4 floats
    giant = tf.make_tensor_proto(1.0, dtype=tf.float32)
    giant.tensor_shape.dim.add(size=1 << 40)  # one value, a trillion elements
    empty = tf.make_tensor_proto(np.ones(3, np.int32))
    empty.ClearField("tensor_content")  # no value at all for three elements
    for proto in (short, giant, empty):
        with pytest.raises(grpc.RpcError) as error:
            predict(stub, "echo", {"v": proto})
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, error.value.details()


def test_classify_needs_a_classify_signature(stub) -> None:
    from tensorflow_serving.apis import classification_pb2, inference_pb2

    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "scale"
    request.input.example_list.examples.add()
    with pytest.raises(grpc.RpcError) as error:
        stub.Classify(request, TIMEOUT)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == (
        "Expected classification signature method_name to be tensorflow/serving/classify. "
        "Was: tensorflow/serving/predict"
    )
    multi = inference_pb2.MultiInferenceRequest()
    for name in ("scale", "echo"):
        multi.tasks.add(method_name="tensorflow/serving/classify").model_spec.name = name
    with pytest.raises(grpc.RpcError) as error:
        stub.MultiInference(multi, TIMEOUT)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "same model name" in error.value.details()
