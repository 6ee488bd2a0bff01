"""Warm-up before ready: TF Serving's TFRecord of PredictionLog, and a JSON list of V2 requests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import mlserve
from mlserve.frameworks.tensorflow import TFModelServer
from mlserve.frameworks.warmup import JSON_FILE, TFRECORD_FILE
from tests.tf_models import TFModels, tf_models


class CountingTF(TFModelServer):
    """Counts predict calls, so a test sees the warm-up run."""

    def predict(self, request):
        self.calls = getattr(self, "calls", 0) + 1
        return super().predict(request)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> TFModels:
    return tf_models(tmp_path_factory)


@pytest.fixture
def version(models: TFModels, tmp_path: Path) -> Path:
    folder = tmp_path / "strings" / "1"
    shutil.copytree(models.module / "1", folder)
    (folder / "assets.extra").mkdir()
    return folder


def write_tfrecord(path: Path, signature: str, inputs: dict[str, np.ndarray]) -> None:
    """Writes warm-up records the way TF Serving's guide does."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(2):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name="strings", signature_name=signature)
            )
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def serve(folder: Path) -> tuple[mlserve.GraphServer, CountingTF]:
    fn = mlserve.new_function("warm")
    fn.add_model("strings", model_path=str(folder), class_name=CountingTF)
    server = fn.to_mock_server()
    return server, next(server.iter_models())


def test_tfrecord_warmup_runs_before_ready(version: Path) -> None:
    write_tfrecord(
        version / TFRECORD_FILE,
        "concat",
        {"a": np.array([b"x", b"\xff"], dtype=object), "b": np.array([b"y", b"z"], dtype=object)},
    )
    write_tfrecord(version / "assets.extra" / "other", "", {})
    server, model = serve(version)
    assert model.ready and model.calls == 2
    assert server.test("/v2/models/strings/ready")["ready"] is True


def test_json_warmup_both_forms(version: Path) -> None:
    requests = [
        {"inputs": [[1.0, 2.0]]},
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]},
    ]
    (version / JSON_FILE).write_text(json.dumps(requests))
    _, model = serve(version)
    assert model.ready and model.calls == 2


def test_tfrecord_and_json_together(version: Path) -> None:
    write_tfrecord(version / TFRECORD_FILE, "", {"x": np.ones((3, 2), np.float32)})
    (version / JSON_FILE).write_text(json.dumps([{"inputs": [[1.0, 2.0]]}]))
    _, model = serve(version)
    assert model.calls == 3


def test_failing_warmup_fails_the_load(version: Path) -> None:
    write_tfrecord(version / TFRECORD_FILE, "concat", {"a": np.array([b"x"], dtype=object)})
    server, model = serve(version)
    assert not model.ready
    assert "warm-up request 1 of 2" in model.error and "missing input 'b'" in model.error
    response = server.test("/v2/models/strings/infer", {"inputs": [[1.0, 2.0]]}, silent=True)
    assert response.status_code == 503 and "warm-up" in response.body["error"]


def test_bad_json_warmup_fails_the_load(version: Path) -> None:
    (version / JSON_FILE).write_text(json.dumps({"inputs": [[1.0, 2.0]]}))
    _, model = serve(version)
    assert not model.ready and "JSON list of request objects" in model.error
