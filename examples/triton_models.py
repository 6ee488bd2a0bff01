"""Triton's example models as ordinary ``V2ModelServer`` classes, so that the
example programs of Triton's Python client (``tritonclient``) run unchanged
against mlserve (docs/triton.md#serve-tritons-example-models).

    mlserve serve examples/triton_models.py --port 8000 --grpc-port 8001 \\
        --model-control-mode explicit
    python simple_http_infer_client.py -u 127.0.0.1:8000
    python simple_grpc_infer_client.py -u 127.0.0.1:8001

The names, tensors and datatypes are Triton's: ``simple`` adds and subtracts
two INT32 [1, 16] tensors, ``simple_string`` does the same on numbers written as
strings, ``simple_int8`` on INT8, and ``simple_identity`` answers its BYTES input
unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import mlserve

NUMPY_TYPES = {
    "INT8": np.int8,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP32": np.float32,
    "FP64": np.float64,
}


class AddSub(mlserve.V2ModelServer):
    """OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise, in the
    ``datatype`` parameter's type (Triton's ``simple`` and ``simple_int8``)."""

    def load(self) -> None:
        datatype = self.get_param("datatype", "INT32")
        self.model = NUMPY_TYPES[datatype]
        tensor = {"datatype": datatype, "shape": [-1, 16]}
        self.inputs = [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}]
        self.outputs = [{"name": "OUTPUT0", **tensor}, {"name": "OUTPUT1", **tensor}]

    def predict(self, request: dict[str, Any]) -> dict[str, np.ndarray]:
        a = np.asarray(request["inputs"]["INPUT0"], dtype=self.model)
        b = np.asarray(request["inputs"]["INPUT1"], dtype=self.model)
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}


class StringAddSub(mlserve.V2ModelServer):
    """Triton's ``simple_string``: BYTES tensors of integers written in UTF-8, added
    and subtracted as numbers, answered as strings again."""

    def load(self) -> None:
        self.model = "string add/sub"
        tensor = {"datatype": "BYTES", "shape": [-1, 16]}
        self.inputs = [{"name": "INPUT0", **tensor}, {"name": "INPUT1", **tensor}]
        self.outputs = [{"name": "OUTPUT0", **tensor}, {"name": "OUTPUT1", **tensor}]

    def predict(self, request: dict[str, Any]) -> dict[str, np.ndarray]:
        a, b = (_numbers(request["inputs"][name]) for name in ("INPUT0", "INPUT1"))
        return {"OUTPUT0": _strings(a + b), "OUTPUT1": _strings(a - b)}


class Identity(mlserve.V2ModelServer):
    """Answers its input unchanged, of the ``datatype`` parameter's type (Triton's
    ``simple_identity`` for BYTES, ``custom_identity_int32`` for INT32)."""

    def load(self) -> None:
        datatype = self.get_param("datatype", "BYTES")
        self.model = NUMPY_TYPES.get(datatype, np.object_)
        self.inputs = [{"name": "INPUT0", "datatype": datatype, "shape": [-1, -1]}]
        self.outputs = [{"name": "OUTPUT0", "datatype": datatype, "shape": [-1, -1]}]

    def predict(self, request: dict[str, Any]) -> np.ndarray:
        return np.asarray(request["inputs"], dtype=self.model)


def _numbers(tensor: Any) -> np.ndarray:
    array = np.asarray(tensor, dtype=np.object_)
    text = [x.decode() if isinstance(x, bytes) else str(x) for x in array.ravel()]
    return np.asarray([int(x) for x in text], dtype=np.int64).reshape(array.shape)


def _strings(numbers: np.ndarray) -> np.ndarray:
    return np.asarray([str(x).encode() for x in numbers.ravel()], dtype=np.object_).reshape(
        numbers.shape
    )


def serving_function() -> mlserve.ServingFunction:
    """Eight models, as many as Triton's example repository holds (the gRPC
    model-control program counts them)."""
    fn = mlserve.new_function("triton-examples")
    fn.add_model("simple", class_name=AddSub, datatype="INT32", max_batch_size=8)
    fn.add_model("simple_int8", class_name=AddSub, datatype="INT8")
    fn.add_model("simple_int64", class_name=AddSub, datatype="INT64")
    fn.add_model("simple_fp32", class_name=AddSub, datatype="FP32")
    fn.add_model("simple_fp64", class_name=AddSub, datatype="FP64")
    fn.add_model("simple_string", class_name=StringAddSub)
    fn.add_model("simple_identity", class_name=Identity, datatype="BYTES")
    fn.add_model("custom_identity_int32", class_name=Identity, datatype="INT32")
    return fn
