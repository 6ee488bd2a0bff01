"""``ONNXModelServer``: an ONNX model run by ONNX Runtime, served as a ``V2ModelServer``
(docs/frameworks.md#onnx-runtime).

The model is ``model.onnx`` (Triton's name), run in one
``onnxruntime.InferenceSession`` (``providers`` parameter, default CPU).
The graph is the model's interface:

- metadata ``inputs`` / ``outputs`` are the graph's, with V2 datatypes and
  -1 for every dynamic dimension; the model's own metadata (producer,
  version, graph name, domain, description, custom metadata map) is in
  ``parameters``;
- named input tensors map to graph inputs by name (a single tensor to a
  single-input graph whatever its name), cast to the input's type; rank and
  fixed dimensions are checked first, so a bad shape is a 400;
- a request's ``outputs`` become the output names ``session.run`` computes
  (all of them by default);
- a ``seq(map(key, value))`` output (the ``ZipMap`` of converted scikit-learn
  classifiers) is answered as a ``[rows, keys]`` tensor, keys in order.

Rows form: ``inputs`` is the batch of a single-input graph, or a list of
``{input name: value}`` rows; the answer is a list (one output) or
``{output name: list}``. Warm-up requests beside the model file run before
it is ready (mlserve.frameworks.warmup).

Explain answers SHAP values of a one-input ``[rows, features]`` model from a
permutation explainer over a background sample (mlserve.frameworks.explainers,
docs/frameworks.md#explanations).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlserve.frameworks.common import (
    check_request,
    model_file,
    requested_outputs,
    require,
    rows_answer,
)
from mlserve.frameworks.explainers import configured_explainer, explained_output
from mlserve.frameworks.warmup import run_warmup
from mlserve.model import V2ModelServer
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.forms import InferenceRequest, shape_matches
from mlserve.protocol.tensors import DATATYPES

__all__ = ["MODEL_FILES", "ONNXModelServer", "onnx_datatype"]

MODEL_FILES = ("model.onnx",)

# ONNX Runtime element type -> V2 datatype (whose numpy dtype is protocol.tensors.DATATYPES')
ONNX_TYPES: dict[str, str] = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "uint16": "UINT16",
    "uint32": "UINT32",
    "uint64": "UINT64",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float": "FP32",
    "double": "FP64",
    "string": "BYTES",
}


def _element(type_name: str) -> str:
    """``tensor(float)`` -> ``float``; ``seq(map(int64,tensor(float)))`` -> ``float``."""
    return type_name.rstrip(")").rsplit("(", 1)[-1]


def onnx_datatype(type_name: str) -> str:
    """The V2 datatype of an ONNX Runtime type: ``tensor(float)`` -> ``FP32``,
    ``seq(map(int64,tensor(float)))`` -> ``FP32`` (its values)."""
    return ONNX_TYPES.get(_element(type_name), "BYTES")


def _dims(shape: list[Any]) -> list[int]:
    return [dim if isinstance(dim, int) and dim >= 0 else -1 for dim in shape]


class ONNXModelServer(V2ModelServer):
    """Serves one ONNX model::

        fn.add_model("resnet", model_path="models/resnet/1/model.onnx",
                     class_name="mlserve.frameworks.onnx.ONNXModelServer")

    ``model_path`` is the model file, or a folder holding it.
    """

    platform = "onnxruntime_onnx"

    def load(self) -> None:
        ort = require("onnxruntime", "onnx")
        self.model_file = model_file(self.model_path, MODEL_FILES)
        providers = self.get_param("providers", None) or ["CPUExecutionProvider"]
        self.model = ort.InferenceSession(str(self.model_file), providers=list(providers))
        self.graph_inputs = {node.name: node for node in self.model.get_inputs()}
        self.graph_outputs = {
            node.name: node
            for node in self.model.get_outputs()
            if node.type.startswith(("tensor(", "seq(map("))
        }
        self.inputs = [
            {"name": n.name, "datatype": onnx_datatype(n.type), "shape": _dims(n.shape)}
            for n in self.graph_inputs.values()
        ]
        self.outputs = [
            {"name": n.name, "datatype": onnx_datatype(n.type), "shape": self._output_dims(n)}
            for n in self.graph_outputs.values()
        ]
        self.explainer = configured_explainer(self, self._explained, folder=self.model_file.parent)
        run_warmup(self, self.model_file.parent)

    @staticmethod
    def _output_dims(node: Any) -> list[int]:
        return _dims(node.shape) if node.type.startswith("tensor(") else [-1, -1]

    def get_metadata(self) -> dict[str, Any]:
        metadata = super().get_metadata()
        meta = self.model.get_modelmeta()
        metadata["parameters"] = {
            "producer_name": meta.producer_name,
            "version": meta.version,
            "graph_name": meta.graph_name,
            "domain": meta.domain,
            "description": meta.description,
            "custom_metadata_map": dict(meta.custom_metadata_map),
        }
        return metadata

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        """Tensors are checked where they are read, so any numeric type goes (it is cast)."""
        return check_request(request)

    def predict(self, request: dict[str, Any]) -> Any:
        feeds = {name: self._cast(name, value) for name, value in self._feeds(request).items()}
        names = requested_outputs(request, list(self.graph_outputs), list(self.graph_outputs))
        ort = require("onnxruntime", "onnx")
        try:
            results = self.model.run(names, feeds)
        except ort.capi.onnxruntime_pybind11_state.InvalidArgument as exc:
            raise InvalidInput(f"the ONNX model rejected the input: {exc}") from None
        outputs = {
            name: _dense(value, self.graph_outputs[name].type)
            for name, value in zip(names, results, strict=True)
        }
        return outputs if isinstance(request, InferenceRequest) else rows_answer(outputs)

    def _explained(self, matrix: np.ndarray) -> np.ndarray:
        """What the explainer explains: one output (``explained_output``) of a
        one-input graph fed ``[rows, features]``."""
        if len(self.graph_inputs) != 1:
            raise InvalidInput("explain takes a model of one [rows, features] input")
        name = explained_output(self.outputs, self.get_param("explain_output", None))
        feed = next(iter(self.graph_inputs))
        (value,) = self.model.run([name], {feed: self._cast(feed, matrix)})
        return _dense(value, self.graph_outputs[name].type).astype(np.float64)

    def _feeds(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request's values by graph input name."""
        if isinstance(request, InferenceRequest):
            tensors: dict[str, Any] = request.tensors
            if len(tensors) == 1 and len(self.graph_inputs) == 1:
                return {next(iter(self.graph_inputs)): next(iter(tensors.values()))}
        else:
            rows = request["inputs"]
            if rows and all(isinstance(row, dict) for row in rows):
                tensors = {name: [row.get(name) for row in rows] for name in self.graph_inputs}
            elif len(self.graph_inputs) == 1:
                tensors = {next(iter(self.graph_inputs)): rows}
            else:
                raise InvalidInput(
                    f"the model has inputs {list(self.graph_inputs)}: send rows of "
                    "{name: value} or named tensors"
                )
        missing = [name for name in self.graph_inputs if name not in tensors]
        unknown = sorted(set(tensors) - set(self.graph_inputs))
        if missing or unknown:
            raise InvalidInput(
                f"the model takes inputs {list(self.graph_inputs)}; "
                f"missing {missing}, unknown {unknown}"
            )
        return tensors

    def _cast(self, name: str, value: object) -> np.ndarray:
        node = self.graph_inputs[name]
        dtype = _element_dtype(node.type)
        if dtype is None:
            raise InvalidInput(f"input '{name}' has type {node.type}, which mlserve cannot feed")
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"input '{name}' cannot be made a {node.type}: {exc}") from None
        if array.dtype == object:
            array = np.vectorize(_str, otypes=[object])(array) if array.size else array
        expected = _dims(node.shape)
        # [] is how ONNX Runtime shows a scalar and an input of unknown rank alike: not checked
        if expected and not shape_matches(expected, array.shape):
            raise InvalidInput(
                f"input '{name}' has shape {list(array.shape)}, the model expects {expected}"
            )
        return array


def _str(value: object) -> str:
    """ONNX Runtime's string tensors hold text: bytes must be UTF-8."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"a string input holds bytes that are not UTF-8: {value[:20]!r}"
        ) from None


def _element_dtype(type_name: str) -> Any:
    """The numpy dtype fed for an ONNX Runtime type; None for a type mlserve cannot feed."""
    datatype = ONNX_TYPES.get(_element(type_name))
    return DATATYPES[datatype] if datatype else None


def _dense(value: object, type_name: str) -> np.ndarray:
    """An output as an array: a tensor as is, a sequence of maps as ``[rows, keys]``."""
    if isinstance(value, list):
        keys = sorted(value[0]) if value else []
        rows = [[row[key] for key in keys] for row in value]
        return np.asarray(rows, dtype=_element_dtype(type_name)).reshape(len(rows), len(keys))
    return np.asarray(value)
