"""Warm-up: requests run on a freshly loaded version before it is marked ready
(docs/tensorflow.md#warm-up).

Two sources in the version folder, run in this order when present:

- ``assets.extra/tf_serving_warmup_requests``: a TFRecord of ``PredictionLog``
  protos whose ``predict_log.request`` is a ``PredictRequest``, as TF Serving
  documents it (needs ``tensorflow`` and ``tensorflow-serving-api``);
- ``assets.extra/mlserve_warmup.json``: a JSON list of request bodies (V2
  tensor form or rows form).

Each request goes through ``preprocess -> validate -> predict`` and the
response encoding; a failing request raises, which fails the load (the model
stays not ready with the error recorded).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path
from typing import Any

from mlserve.protocol.forms import InferenceRequest, build_outputs, decode_request
from mlserve.protocol.tensors import encode_tensor, loads

__all__ = ["TFRECORD_FILE", "JSON_FILE", "read_prediction_logs", "run_warmup", "warmup_requests"]

logger = logging.getLogger("mlserve.frameworks")

TFRECORD_FILE = "assets.extra/tf_serving_warmup_requests"
JSON_FILE = "assets.extra/mlserve_warmup.json"


class WarmupError(RuntimeError):
    """A warm-up request failed: the version must not take traffic."""


def read_prediction_logs(path: str | Path) -> list[dict[str, Any]]:
    """V2 request bodies from a TFRecord of TF Serving ``PredictionLog`` protos."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    bodies = []
    for record in tf.data.TFRecordDataset(str(path)):
        log = prediction_log_pb2.PredictionLog()
        log.ParseFromString(record.numpy())
        if log.WhichOneof("log_type") != "predict_log":
            raise WarmupError(
                f"{path}: only predict_log warm-up records are supported, "
                f"got {log.WhichOneof('log_type')}"
            )
        bodies.append(_predict_request_body(tf, log.predict_log.request))
    return bodies


def _predict_request_body(tf: Any, request: Any) -> dict[str, Any]:
    inputs = [
        encode_tensor(name, tf.make_ndarray(proto), binary=True)
        for name, proto in request.inputs.items()
    ]
    body: dict[str, Any] = {"inputs": inputs}
    if request.model_spec.signature_name:
        body["parameters"] = {"signature_name": request.model_spec.signature_name}
    if request.output_filter:
        body["outputs"] = [{"name": name} for name in request.output_filter]
    return body


def warmup_requests(folder: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """``(source file, request body)`` for every warm-up request of a version folder."""
    folder = Path(folder)
    requests: list[tuple[str, dict[str, Any]]] = []
    tfrecord = folder / TFRECORD_FILE
    if tfrecord.is_file():
        requests += [(str(tfrecord), body) for body in read_prediction_logs(tfrecord)]
    json_file = folder / JSON_FILE
    if json_file.is_file():
        bodies = loads(json_file.read_bytes())
        if not isinstance(bodies, list) or not all(isinstance(b, dict) for b in bodies):
            raise WarmupError(f"{json_file} must hold a JSON list of request objects")
        requests += [(str(json_file), body) for body in bodies]
    return requests


def run_warmup(model: Any, folder: str | Path) -> int:
    """Run the warm-up requests of ``folder`` on ``model``; returns how many ran."""
    requests = warmup_requests(folder)
    for index, (source, body) in enumerate(requests):
        try:
            _run_one(model, body)
        except Exception as exc:
            raise WarmupError(
                f"warm-up request {index + 1} of {len(requests)} ({source}) failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if requests:
        logger.info("model %s: %d warm-up requests ran", model.name, len(requests))
    return len(requests)


def _run_one(model: Any, body: dict[str, Any]) -> None:
    request = decode_request(body)
    request = model.validate(model.preprocess(request, "infer"), "infer")
    outputs = model.predict(request)
    if inspect.isawaitable(outputs):
        outputs = asyncio.run(_awaited(outputs))
    if isinstance(request, InferenceRequest):
        default_name = model.outputs[0]["name"] if model.outputs else "output-0"
        # binary encoding: warm-up data need not be valid UTF-8 text
        binary = {"outputs": request.get("outputs"), "parameters": {"binary_data_output": True}}
        build_outputs(outputs, binary, default_name)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
