"""``TFModelServer``: a TensorFlow SavedModel served as a ``V2ModelServer``
(docs/tensorflow.md#tfmodelserver).

One SavedModel version, loaded with ``tf.saved_model.load``. Its signatures
are the model's interface:

- metadata (``inputs`` / ``outputs``) comes from the signature named by the
  ``signature_name`` parameter (default ``serving_default``), with V2
  datatypes and -1 for any size;
- a request picks another signature with ``parameters.signature_name`` (V2
  style) or a top-level ``signature_name`` (TF Serving style), in that order;
- tensor form: named tensors map to the signature's inputs by name, and a
  single tensor maps to a single-input signature whatever its name; the
  answer has one output tensor per signature output;
- rows form: ``inputs`` is the single input's batch (or a list of
  ``{input name: value}`` rows); the answer is a list (one output) or
  ``{output name: list}``.

``predict`` is plain (sync) code: the server runs it in the worker pool, or
through the adaptive batcher when ``max_batch_size`` is set (mlserve.batching).
Warm-up requests in ``assets.extra/`` run before the version is ready
(mlserve.frameworks.warmup). Explain answers SHAP values of a one-input
``[rows, features]`` signature from a permutation explainer over a background
sample (mlserve.frameworks.explainers, docs/frameworks.md#explanations).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import numpy as np

from mlserve.frameworks.common import require
from mlserve.frameworks.explainers import configured_explainer, explained_output
from mlserve.model import V2ModelServer
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.forms import InferenceRequest, check_declared_inputs

__all__ = ["TFModelServer", "readable_tf_error", "resolve_saved_model", "signature_name_of"]

DEFAULT_SIGNATURE = "serving_default"
# Input layouts (signature, names, dtypes, shapes) remembered as valid, at most.
_MAX_ACCEPTED_LAYOUTS = 256

# tf.DType.name -> V2 datatype
TF_DATATYPES = {
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
    "float32": "FP32",
    "float64": "FP64",
    "bfloat16": "BF16",
    "string": "BYTES",
}


def resolve_saved_model(model_path: str | Path) -> Path:
    """The SavedModel folder for ``model_path``: itself, or its highest numbered version."""
    path = Path(model_path).expanduser()
    if (path / "saved_model.pb").is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"model_path {model_path} does not exist")
    versions = [p for p in path.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()]
    if not versions:
        raise FileNotFoundError(
            f"{model_path} is neither a SavedModel nor a folder of numbered versions"
        )
    return max(versions, key=lambda p: int(p.name))


def signature_name_of(request: object, default: str = DEFAULT_SIGNATURE) -> str:
    """The signature a request asks for: ``parameters.signature_name``, then ``signature_name``."""
    if not isinstance(request, dict):
        return default
    parameters = request.get("parameters")
    if isinstance(parameters, dict) and parameters.get("signature_name"):
        return str(parameters["signature_name"])
    return str(request.get("signature_name") or default)


def _dims(shape: Any) -> list[int]:
    return [-1 if dim is None else int(dim) for dim in shape.as_list()]


def _declare(name: str, spec: Any) -> dict[str, Any]:
    declared: dict[str, Any] = {
        "name": name,
        "datatype": TF_DATATYPES.get(spec.dtype.name, "BYTES"),
    }
    if spec.shape.rank is not None:
        declared["shape"] = _dims(spec.shape)
    return declared


# Lines of a TF runtime error that name graph internals, not the client's mistake.
_TF_INTERNALS = re.compile(
    r"^(Graph execution error|Detected at node|<stack traces|\s*\[\[\{\{node)|^\s*$"
)


def readable_tf_error(exc: Exception) -> str:
    """The client's part of a TensorFlow runtime error: no node names, op ids or traces."""
    message = str(getattr(exc, "message", None) or exc)
    lines = [line for line in message.splitlines() if not _TF_INTERNALS.match(line)]
    text = " ".join(line.strip() for line in lines)
    return re.sub(r"\s*\[Op:[^\]]*\]", "", text).strip() or "invalid input"


def _as_bytes(value: Any) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


class Signature:
    """One callable signature with its V2 declarations."""

    def __init__(self, name: str, function: Any) -> None:
        self.name = name
        self.function = function
        # sorted by name, as TF Serving's signature maps print
        self.input_specs: dict[str, Any] = dict(
            sorted(function.structured_input_signature[1].items())
        )
        self.output_specs: dict[str, Any] = dict(sorted(function.structured_outputs.items()))
        self.inputs = [_declare(key, spec) for key, spec in self.input_specs.items()]
        self.outputs = [_declare(key, spec) for key, spec in self.output_specs.items()]

    def feeds(self, request: dict[str, Any]) -> dict[str, Any]:
        """The request's values by signature input name."""
        if isinstance(request, InferenceRequest):
            tensors: dict[str, Any] = request.tensors
            if len(tensors) == 1 and len(self.input_specs) == 1:
                return {next(iter(self.input_specs)): next(iter(tensors.values()))}
            return tensors
        rows = request["inputs"]
        if rows and all(isinstance(row, dict) for row in rows):
            return {name: [row.get(name) for row in rows] for name in self.input_specs}
        if len(self.input_specs) != 1:
            raise InvalidInput(
                f"signature '{self.name}' has inputs {sorted(self.input_specs)}: send rows of "
                "{name: value} or named tensors"
            )
        return {next(iter(self.input_specs)): rows}

    def __call__(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        missing = sorted(set(self.input_specs) - set(feeds))
        unknown = sorted(set(feeds) - set(self.input_specs))
        if missing or unknown:
            raise InvalidInput(
                f"signature '{self.name}' takes inputs {sorted(self.input_specs)}; "
                f"missing {missing}, unknown {unknown}"
            )
        tensors = {name: self._tensor(tf, name, value) for name, value in feeds.items()}
        try:
            result = self.function(**tensors)
        except tf.errors.InvalidArgumentError as exc:
            raise InvalidInput(f"the model rejected its input: {readable_tf_error(exc)}") from None
        return {name: value.numpy() for name, value in result.items()}

    def _tensor(self, tf: Any, name: str, value: Any) -> Any:
        dtype = self.input_specs[name].dtype
        try:
            if dtype == tf.string:
                array = np.asarray(value, dtype=object)
                flat = [_as_bytes(item) for item in array.ravel()]
                return tf.constant(flat, dtype=tf.string, shape=array.shape)
            return tf.constant(np.asarray(value, dtype=dtype.as_numpy_dtype))
        except (TypeError, ValueError) as exc:
            raise InvalidInput(
                f"input '{name}' cannot be made a {dtype.name} tensor: {exc}"
            ) from None


class TFModelServer(V2ModelServer):
    """Serves one TensorFlow SavedModel version::

        fn.add_model("mnist", model_path="models/mnist/",  # or models/mnist/3
                     class_name="mlserve.frameworks.tensorflow.TFModelServer",
                     signature_name="serving_default", max_batch_size=32)

    ``model_path`` is a SavedModel folder, or a base folder of numbered
    versions (the highest is served).
    """

    platform = "tensorflow_savedmodel"

    def load(self) -> None:
        from mlserve.frameworks.warmup import run_warmup

        tf = require("tensorflow", "tensorflow")  # missing: one line names the extra

        self.saved_model_dir = resolve_saved_model(self.model_path or "")
        self.model = tf.saved_model.load(str(self.saved_model_dir))
        self.signatures = {name: Signature(name, fn) for name, fn in self.model.signatures.items()}
        self.signature_name = str(self.get_param("signature_name", DEFAULT_SIGNATURE))
        self._accepted_layouts: set[tuple[Any, ...]] = set()  # see validate
        default = self.signature(self.signature_name)
        self.inputs, self.outputs = default.inputs, default.outputs
        self.explainer = configured_explainer(self, self._explained, folder=self.saved_model_dir)
        run_warmup(self, self.saved_model_dir)

    def signature(self, name: str) -> Signature:
        """The signature ``name``; an unknown name is a 400."""
        try:
            return self.signatures[name]
        except KeyError:
            raise InvalidInput(
                f"signature '{name}' not found, the model has {sorted(self.signatures)}"
            ) from None

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        """Check tensors against the requested signature (not only the default one).

        The check reads only names, dtypes and shapes, so a layout that passed once
        is remembered: a batched model validates each request on the event loop."""
        if isinstance(request, InferenceRequest):
            name = signature_name_of(request, self.signature_name)
            layout = (name, *[(n, a.dtype, a.shape) for n, a in request.tensors.items()])
            accepted = self._accepted_layouts
            if layout not in accepted:
                check_declared_inputs(request.tensors, self.signature(name).inputs, model=self.name)
                if len(accepted) < _MAX_ACCEPTED_LAYOUTS:
                    accepted.add(layout)
            return request
        return super().validate(request, operation)

    def predict(self, request: dict[str, Any]) -> Any:
        signature = self.signature(signature_name_of(request, self.signature_name))
        result = signature(signature.feeds(request))
        if isinstance(request, InferenceRequest):
            return result
        if len(result) == 1:
            return _jsonable(next(iter(result.values())))
        return {name: _jsonable(value) for name, value in result.items()}

    def _explained(self, matrix: np.ndarray) -> np.ndarray:
        """What the explainer explains: one output (``explained_output``) of the
        default signature, fed ``[rows, features]`` as its one input."""
        signature = self.signature(self.signature_name)
        if len(signature.input_specs) != 1:
            raise InvalidInput("explain takes a signature of one [rows, features] input")
        name = explained_output(signature.outputs, self.get_param("explain_output", None))
        result = signature({next(iter(signature.input_specs)): matrix})
        return np.asarray(result[name], dtype=np.float64)

    def signature_defs(self) -> dict[str, Any]:
        """The SignatureDefs as TF Serving's ``/metadata`` shows them (JSON of the protos)."""
        from google.protobuf.json_format import MessageToDict
        from tensorflow.core.protobuf import saved_model_pb2

        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString((self.saved_model_dir / "saved_model.pb").read_bytes())
        meta_graph = saved.meta_graphs[0]
        return {
            name: MessageToDict(
                meta_graph.signature_def[name],
                preserving_proto_field_name=True,
                always_print_fields_with_no_presence=True,
            )
            for name in meta_graph.signature_def
            if not name.startswith("__")
        }


def _jsonable(array: np.ndarray) -> Any:
    """Rows-form output: a nested list; bytes as text, or ``{"b64": ...}`` when not UTF-8."""
    if array.dtype != object:
        return array.tolist()
    return np.vectorize(_text, otypes=[object])(array).tolist() if array.size else array.tolist()


def _text(value: object) -> Any:
    if not isinstance(value, bytes):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode("ascii")}
