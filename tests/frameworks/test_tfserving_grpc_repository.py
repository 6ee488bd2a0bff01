"""TF Serving's gRPC API on a repository of real SavedModels, served with model control
on and TF Serving's services also alone on ``--tfs-grpc-port`` (tests/grpc/repository_server.py).
Client code is TF Serving's own: stubs, ``tf.make_tensor_proto``, ``tf.train.Example``s,
and a model manager that drives ModelService as Cortex's TensorFlow client does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.netserver import ROOT
from tests.services import free_port, wait_for_port
from tests.tf_models import TFModels, tf_models

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip("tensorflow")
from tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from tensorflow_serving.config import model_server_config_pb2  # noqa: E402

EXAMPLE = ROOT / "examples" / "tf_repository" / "half_plus_two"
TIMEOUT = 30.0
State = get_model_status_pb2.ModelVersionStatus.State

CONFIG = """
model_config_list {
  config { name: 'half_plus_two' base_path: '%(half)s' model_platform: 'tensorflow'
           model_version_policy { all {} }
           version_labels { key: 'stable' value: 1 } version_labels { key: 'canary' value: 2 } }
  config { name: 'module' base_path: '%(module)s' model_platform: 'tensorflow' }
  config { name: 'examples' base_path: '%(examples)s' model_platform: 'tensorflow' }
}
"""


class Served:
    def __init__(self, grpc_port: int, tfs_port: int, models: TFModels, half: Path) -> None:
        self.grpc_port, self.tfs_port, self.models, self.half = grpc_port, tfs_port, models, half


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    models: TFModels = tf_models(tmp_path_factory)
    root = tmp_path_factory.mktemp("tfs-grpc")
    shutil.copytree(EXAMPLE, root / "half_plus_two")
    config = root / "models.config"
    paths = {"half": root / "half_plus_two", "module": models.module, "examples": models.examples}
    config.write_text(CONFIG % paths)
    port, grpc_port, tfs_port = free_port(), free_port(), free_port()
    command = [sys.executable, "-m", "tests.grpc.repository_server", str(config)]
    proc = subprocess.Popen(
        [*command, str(port), str(grpc_port), str(tfs_port)], cwd=ROOT, stdout=subprocess.DEVNULL
    )
    try:
        for each in (port, grpc_port, tfs_port):
            wait_for_port(each, timeout=120, proc=proc)
        yield Served(grpc_port, tfs_port, models, root / "half_plus_two")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def stub(served: Served):
    channel = grpc.insecure_channel(f"127.0.0.1:{served.tfs_port}")  # the 8500-style port
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
    channel.close()


def half_plus_two(stub, **spec) -> list[float]:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "half_plus_two"
    if "version" in spec:
        request.model_spec.version.value = spec["version"]
    if "label" in spec:
        request.model_spec.version_label = spec["label"]
    request.inputs["x"].CopyFrom(tf.make_tensor_proto([1.0, 2.0], shape=[2]))
    result = stub.Predict(request, TIMEOUT)
    return tf.make_ndarray(result.outputs["y"]).tolist()


def test_predict_by_version_label_and_latest(stub) -> None:
    v1, v2 = half_plus_two(stub, version=1), half_plus_two(stub, version=2)
    assert v1 != v2
    assert half_plus_two(stub, label="stable") == v1
    assert half_plus_two(stub, label="canary") == v2
    assert half_plus_two(stub) == v2
    with pytest.raises(grpc.RpcError) as error:
        half_plus_two(stub, label="nightly")
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_status_by_label_and_metadata_of_a_saved_model(served: Served, stub) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{served.grpc_port}") as channel:
        models = model_service_pb2_grpc.ModelServiceStub(channel)
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "half_plus_two"
        request.model_spec.version_label = "canary"
        status = models.GetModelStatus(request, TIMEOUT).model_version_status
        assert [(s.version, s.state) for s in status] == [(2, State.AVAILABLE)]
        request.model_spec.version.value = 9
        with pytest.raises(grpc.RpcError) as error:
            models.GetModelStatus(request, TIMEOUT)
        assert error.value.details() == "Could not find version 9 of model half_plus_two"
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "examples"
    result = stub.GetModelMetadata(request, TIMEOUT)
    assert result.model_spec.version.value == 1
    defs = get_model_metadata_pb2.SignatureDefMap()
    result.metadata["signature_def"].Unpack(defs)
    methods = {name: d.method_name for name, d in defs.signature_def.items()}
    assert methods == {
        "classify_x": "tensorflow/serving/classify",
        "regress_x": "tensorflow/serving/regress",
        "serving_default": "tensorflow/serving/predict",
    }
    assert defs.signature_def["classify_x"].inputs["inputs"].dtype == tf.string.as_datatype_enum


def test_string_tensors_through_a_named_signature(stub) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "module"
    request.model_spec.signature_name = "concat"
    request.inputs["a"].CopyFrom(tf.make_tensor_proto(["ab", "é"]))
    request.inputs["b"].CopyFrom(tf.make_tensor_proto(["cd", "!"]))
    result = stub.Predict(request, TIMEOUT)
    assert list(result.outputs["output"].string_val) == [b"abcd", "é!".encode()]
    assert result.model_spec.signature_name == "concat"


def examples(*values: float) -> list[tf.train.Example]:
    return [
        tf.train.Example(
            features=tf.train.Features(
                feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=[v]))}
            )
        )
        for v in values
    ]


def test_classify_regress_and_multi_inference(stub) -> None:
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "examples"
    request.model_spec.signature_name = "classify_x"
    request.input.example_list.examples.extend(examples(2.0, 4.0))
    result = stub.Classify(request, TIMEOUT).result
    assert [[(c.label, c.score) for c in row.classes] for row in result.classifications] == [
        [("low", 2.0), ("high", 3.0)],
        [("low", 4.0), ("high", 4.0)],
    ]

    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "examples"
    request.model_spec.signature_name = "regress_x"
    context = examples(6.0)[0]
    request.input.example_list_with_context.context.CopyFrom(context)
    request.input.example_list_with_context.examples.extend([tf.train.Example(), *examples(2.0)])
    values = [r.value for r in stub.Regress(request, TIMEOUT).result.regressions]
    assert values == [5.0, 3.0]  # the first example takes x from the context

    request.model_spec.signature_name = "serving_default"  # a predict signature
    with pytest.raises(grpc.RpcError) as error:
        stub.Regress(request, TIMEOUT)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Expected regression signature method_name to be tensorflow/serving/regress" in (
        error.value.details()
    )

    request.model_spec.signature_name = "nope"
    with pytest.raises(grpc.RpcError) as error:
        stub.Regress(request, TIMEOUT)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == "No signature was found with the name: nope"

    multi = inference_pb2.MultiInferenceRequest()
    multi.input.example_list.examples.extend(examples(8.0))
    for signature, method in (("classify_x", "classify"), ("regress_x", "regress")):
        task = multi.tasks.add()
        task.model_spec.name = "examples"
        task.model_spec.signature_name = signature
        task.method_name = f"tensorflow/serving/{method}"
    results = stub.MultiInference(multi, TIMEOUT).results
    assert [c.score for c in results[0].classification_result.classifications[0].classes] == [
        8.0,
        6.0,
    ]
    assert [r.value for r in results[1].regression_result.regressions] == [6.0]


class ModelManager:
    """A model-management layer over TF Serving's ModelService, as Cortex drives TF Serving:
    the running config is replaced whole; status is polled until the versions settle."""

    def __init__(self, address: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = model_service_pb2_grpc.ModelServiceStub(self.channel)
        self.models: dict[str, str] = {}

    def _reload(self) -> None:
        config = model_server_config_pb2.ModelServerConfig()
        for name, path in self.models.items():
            config.model_config_list.config.add(
                name=name, base_path=path, model_platform="tensorflow"
            )
        request = model_management_pb2.ReloadConfigRequest(config=config)
        response = self.stub.HandleReloadConfigRequest(request, TIMEOUT)
        assert response.status.error_code == 0, response.status.error_message

    def load(self, name: str, path: str) -> None:
        self.models[name] = path
        self._reload()

    def unload(self, name: str) -> None:
        del self.models[name]
        self._reload()

    def states(self, name: str) -> dict[int, int] | None:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = name
        try:
            response = self.stub.GetModelStatus(request, TIMEOUT)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return {s.version: s.state for s in response.model_version_status}

    def wait(self, name: str, done, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not done(self.states(name)):
            assert time.monotonic() < deadline, f"{name}: {self.states(name)}"
            time.sleep(0.1)


def test_load_poll_predict_unload_through_model_service(served: Served, stub) -> None:
    manager = ModelManager(f"127.0.0.1:{served.grpc_port}")
    assert manager.states("half_plus_two") == {1: State.AVAILABLE, 2: State.AVAILABLE}
    # the manager owns the config from now on: what it does not list is unloaded
    manager.models = {"half_plus_two": str(served.half), "examples": str(served.models.examples)}
    errors: list[Exception] = []
    answered = [0]
    reloading = threading.Event()

    def keep_calling() -> None:  # the model that stays must answer all through the reload
        while not reloading.is_set():
            try:
                assert half_plus_two(stub) == [3.5, 4.0]  # version 2, before and after
                answered[0] += 1
            except Exception as exc:  # noqa: BLE001 - every failure counts
                errors.append(exc)

    caller = threading.Thread(target=keep_calling)
    caller.start()
    mlp = served.half.parent / "mlp"  # a request loads only from the repository
    shutil.copytree(served.models.mlp, mlp)
    try:
        manager.load("mlp", str(mlp))
    finally:
        reloading.set()
        caller.join()
    assert not errors and answered[0] > 0
    manager.wait("mlp", lambda states: states == {1: State.AVAILABLE})
    assert manager.states("module") is None  # absent from the new config: unloaded
    # no policy in the new config: the latest version only, as in TF Serving
    manager.wait("half_plus_two", lambda states: states == {2: State.AVAILABLE})

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(x))
    result = stub.Predict(request, TIMEOUT)
    np.testing.assert_allclose(
        tf.make_ndarray(result.outputs["output_0"]), served.models.mlp_expected(x), rtol=1e-5
    )

    manager.unload("mlp")
    manager.wait("mlp", lambda states: states is None or set(states.values()) == {State.END})
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, TIMEOUT)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    assert manager.states("examples") == {1: State.AVAILABLE}

    def reload(**model: str) -> grpc.RpcError:
        bad = model_server_config_pb2.ModelServerConfig()
        bad.model_config_list.config.add(name="ghost", **model)
        with pytest.raises(grpc.RpcError) as error:
            manager.stub.HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(config=bad), TIMEOUT
            )
        return error.value

    error = reload(base_path=str(served.half.parent / "ghost"), model_platform="tensorflow")
    assert error.code() == grpc.StatusCode.UNAVAILABLE and "ghost" in error.details()
    # what a request names never leaves the repository, nor imports a class by name
    error = reload(base_path=str(served.models.mlp), model_platform="tensorflow")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "outside the model repository" in error.details()
    error = reload(base_path=str(served.half.parent / "ghost"), model_platform="os.system")
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "platform" in error.details()
    manager.channel.close()


def test_a_failed_reload_leaves_the_running_config_serving(served: Served, stub) -> None:
    """HandleReloadConfigRequest is all or nothing: when one model of the new config
    cannot serve (no such folder, a failing load), the error is reported and the models
    of the running config, those the new one leaves out included, keep serving."""
    manager = ModelManager(f"127.0.0.1:{served.grpc_port}")
    manager.models = {"half_plus_two": str(served.half), "examples": str(served.models.examples)}
    manager._reload()
    manager.wait("examples", lambda states: states == {1: State.AVAILABLE})
    manager.wait("half_plus_two", lambda states: states == {2: State.AVAILABLE})
    broken = served.half.parent / "broken" / "1"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")

    for name, path in (("ghost", "ghost"), ("broken", "broken")):
        config = model_server_config_pb2.ModelServerConfig()
        config.model_config_list.config.add(
            name="half_plus_two", base_path=str(served.half), model_platform="tensorflow"
        )
        config.model_config_list.config.add(
            name=name, base_path=str(served.half.parent / path), model_platform="tensorflow"
        )
        with pytest.raises(grpc.RpcError) as error:
            manager.stub.HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(config=config), TIMEOUT
            )
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE, error.value.details()
        assert name in error.value.details()
        # nothing changed: "examples", absent from the new config, still serves
        assert manager.states("examples") == {1: State.AVAILABLE}
        assert manager.states("half_plus_two") == {2: State.AVAILABLE}
        assert manager.states(name) is None
        assert half_plus_two(stub) == [3.5, 4.0]
        request = regression_pb2.RegressionRequest()
        request.model_spec.name = "examples"
        request.model_spec.signature_name = "regress_x"
        request.input.example_list.examples.extend(examples(8.0))
        assert [r.value for r in stub.Regress(request, TIMEOUT).result.regressions] == [6.0]
    manager.channel.close()
