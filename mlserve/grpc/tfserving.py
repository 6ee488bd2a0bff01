"""TensorFlow Serving's gRPC API over a GraphServer (docs/tensorflow.md#tf-servings-grpc-api):
``PredictionService`` (Predict, GetModelMetadata, Classify, Regress, MultiInference)
and ``ModelService`` (GetModelStatus, HandleReloadConfigRequest).

Every call resolves ``ModelSpec`` (version, ``version_label`` or the highest)
through the same helpers as the REST face (mlserve.server.tfserving), then runs
a V2 request through ``GraphServer.run_async``, so any ``V2ModelServer`` is
reachable: its V2 metadata is a ``serving_default`` predict signature.
``tensor_content`` passes to the model as raw bytes (numpy reads them in
place); outputs are written in the typed ``*_val`` fields, as TF Serving does.

The stubs ship in ``tensorflow-serving-api``; importing them imports
TensorFlow (its framework protos), so this module is imported only when a
gRPC port is served.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import numpy as np
from google.protobuf import any_pb2, json_format
from tensorflow.core.example import example_pb2
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
    status_pb2,
)

from mlserve.core.aio import run_in_threadpool
from mlserve.core.events import Event, Response, Trigger
from mlserve.core.hidden import hidden
from mlserve.grpc.status import ServicerContext, abort, grpc_code
from mlserve.protocol.errors import (
    Forbidden,
    MLServeError,
    ModelNotFound,
    error_body,
    status_of,
)
from mlserve.protocol.tensors import DATATYPES, RAW, decode_tensor, encode_raw, encode_tensor
from mlserve.repository.config import configs_from_proto, confine
from mlserve.server.tfserving import (
    DT_NAMES,
    infer_path,
    model_status,
    ready_model,
    resolve_route,
    signature_defs,
)

if TYPE_CHECKING:
    from tensorflow_serving.apis import input_pb2

    from mlserve.graph.routers import BaseModelRouter
    from mlserve.model import V2ModelServer
    from mlserve.server.graph_server import GraphServer

T = TypeVar("T")

__all__ = ["add_tfserving_services"]

_TRIGGER = Trigger(kind="grpc", name="tfserving-grpc")
DEFAULT_SIGNATURE = "serving_default"
PREDICT, CLASSIFY, REGRESS = (
    "tensorflow/serving/predict",
    "tensorflow/serving/classify",
    "tensorflow/serving/regress",
)

# The most elements a short typed tensor is filled to (TF repeats its last value):
# a few values must not make a client-chosen giant array.
MAX_FILL = 1 << 24

# V2 datatype <-> TF DataType enum value, and the typed TensorProto field of each
V2_OF_DT = {types_pb2.DataType.Value(dt): v2 for v2, dt in DT_NAMES.items()}
DT_OF_V2 = {v2: dt for dt, v2 in V2_OF_DT.items()}
VAL_FIELD = {
    "BOOL": "bool_val",
    "UINT8": "int_val",
    "UINT16": "int_val",
    "INT8": "int_val",
    "INT16": "int_val",
    "INT32": "int_val",
    "UINT32": "uint32_val",
    "INT64": "int64_val",
    "UINT64": "uint64_val",
    "FP16": "half_val",
    "BF16": "half_val",
    "FP32": "float_val",
    "FP64": "double_val",
    "BYTES": "string_val",
}


class TFServingError(Exception):
    """An answer with a TF Serving gRPC code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _invalid(message: str) -> TFServingError:
    return TFServingError(grpc.StatusCode.INVALID_ARGUMENT, message)


# ---- tensors ---------------------------------------------------------------------------


def tensor_to_core(name: str, proto: tensor_pb2.TensorProto) -> dict[str, Any]:
    """A ``TensorProto`` as a V2 input tensor; ``tensor_content`` is passed on as raw bytes."""
    datatype = V2_OF_DT.get(proto.dtype)
    if datatype is None:
        dtype = types_pb2.DataType.Name(proto.dtype)
        raise _invalid(f"input '{name}': {dtype} tensors are not served (no V2 datatype)")
    if proto.tensor_shape.unknown_rank:
        raise _invalid(f"input '{name}': the tensor shape has an unknown rank")
    shape = [int(dim.size) for dim in proto.tensor_shape.dim]
    if any(size < 0 for size in shape):
        raise _invalid(f"input '{name}': tensor shape {shape} has a negative dimension")
    obj: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
    if proto.tensor_content and datatype != "BYTES":
        obj[RAW] = proto.tensor_content
        return obj
    array = _typed_values(name, proto, datatype, math.prod(shape))
    obj[RAW] = encode_raw(array.reshape(shape), datatype)
    return obj


def _typed_values(
    name: str, proto: tensor_pb2.TensorProto, datatype: str, count: int
) -> np.ndarray:
    values = getattr(proto, VAL_FIELD[datatype])
    if datatype == "BYTES":
        array = np.empty(len(values), dtype=object)
        array[:] = list(values)
    elif datatype == "FP16":
        array = np.array(values, dtype=np.uint16).view(np.float16)
    elif datatype == "BF16":
        array = (np.array(values, dtype=np.uint32) << 16).view(np.float32)
    else:
        array = np.array(values, dtype=DATATYPES[datatype])
    if len(array) == count:
        return array
    if 0 < len(array) < count <= MAX_FILL:
        # TF fills the rest of a short tensor with its last value
        return np.concatenate([array, np.repeat(array[-1:], count - len(array))])
    raise _invalid(
        f"tensor parsing error: {name} ({len(array)} values in {VAL_FIELD[datatype]} for "
        f"{count} elements)"
    )


def tensor_proto(array: np.ndarray, datatype: str) -> tensor_pb2.TensorProto:
    """An output array as a ``TensorProto`` in its typed ``*_val`` field (as TF Serving writes)."""
    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=int(size)) for size in array.shape]
    proto = tensor_pb2.TensorProto(
        dtype=DT_OF_V2[datatype], tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=dims)
    )
    flat = np.asarray(array).reshape(-1)
    if datatype == "BYTES":
        values: Any = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat]
    elif datatype in ("FP16", "BF16"):
        values = np.frombuffer(encode_raw(flat, datatype), dtype="<u2").tolist()
    else:
        values = flat.tolist()
    getattr(proto, VAL_FIELD[datatype]).extend(values)
    return proto


# ---- the shared steps of every call ----------------------------------------------------


def _version_of(spec: model_pb2.ModelSpec) -> tuple[str | None, str | None]:
    version = str(spec.version.value) if spec.HasField("version") else None
    return version, spec.version_label or None


def _request_text(spec: model_pb2.ModelSpec) -> str:
    version, label = _version_of(spec)
    if label:
        return f"Labeled({spec.name}, {label})"
    return f"Specific({spec.name}, {version})" if version else f"Latest({spec.name})"


class _Calls:
    """Model resolution and V2 inference shared by both services."""

    def __init__(self, server: GraphServer) -> None:
        self.server = server
        # SignatureDefs by model: a TF model reads them from its saved_model.pb
        self._defs: weakref.WeakKeyDictionary[V2ModelServer, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )

    def signature_defs(self, model: V2ModelServer) -> dict[str, Any]:
        """The model's SignatureDefs (JSON of the protos), read once per model object."""
        defs = self._defs.get(model)
        if defs is None:
            defs = self._defs[model] = signature_defs(model)
        return defs

    def resolve(self, spec: model_pb2.ModelSpec) -> tuple[BaseModelRouter, str, V2ModelServer]:
        """(router, route key, ready model) of a ``ModelSpec``."""
        if not spec.name:
            raise _invalid("Missing ModelSpec name")
        version, label = _version_of(spec)
        try:
            router, key = resolve_route(self.server, spec.name, version, label)
        except ModelNotFound:
            if label and self._has_model(spec.name):
                raise _invalid(f"Unrecognized servable version label: {label}") from None
            raise TFServingError(
                grpc.StatusCode.NOT_FOUND, f"Servable not found for request: {_request_text(spec)}"
            ) from None
        return router, key, ready_model(router, key)

    def _has_model(self, name: str) -> bool:
        routes = getattr(getattr(self.server.graph, "object", None), "routes", {})
        return any(key.partition(":")[0] == name for key in routes)

    def signature(self, model: V2ModelServer, name: str, method: str) -> dict[str, Any]:
        """The SignatureDef (JSON) ``name`` of ``model``, checked to be of ``method``."""
        defs = self.signature_defs(model)
        if name not in defs and method != PREDICT:
            raise _invalid(f"No signature was found with the name: {name}")
        if name not in defs:
            raise TFServingError(
                grpc.StatusCode.FAILED_PRECONDITION, f'Serving signature key "{name}" not found.'
            )
        signature: dict[str, Any] = defs[name]
        found = signature.get("method_name", PREDICT)
        if method != PREDICT and found != method:
            kind = "classification" if method == CLASSIFY else "regression"
            raise _invalid(f"Expected {kind} signature method_name to be {method}. Was: {found}")
        return signature

    async def infer(
        self,
        router: BaseModelRouter,
        key: str,
        model: V2ModelServer,
        signature: str,
        inputs: list[dict[str, Any]],
    ) -> dict[str, dict[str, Any]]:
        """Run a V2 request on the route; the output tensor objects by name."""
        parameters: dict[str, Any] = {"binary_data_output": True}
        if hasattr(model, "signature_defs"):
            parameters["signature_name"] = signature
        body = {"inputs": inputs, "parameters": parameters}
        event = Event(body=body, path=infer_path(router, key), method="POST", trigger=_TRIGGER)
        response: Response = await self.server.run_async(event)
        if response.status_code >= 300:
            raise _ResponseError(response)
        return {obj["name"]: obj for obj in response.body["outputs"]}


class _ResponseError(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(str(response.body))
        self.response = response


def _spec(model: V2ModelServer, signature: str) -> model_pb2.ModelSpec:
    spec = model_pb2.ModelSpec(name=model.name.partition(":")[0], signature_name=signature)
    if str(model.version).isdigit():
        spec.version.value = int(model.version)
    return spec


async def _answer(server: GraphServer, context: ServicerContext, call: Awaitable[T]) -> T:
    """Await ``call``; every error becomes its gRPC code and message, logged and
    hidden as the server's errors are (docs/serving.md#errors-in-the-log)."""
    try:
        return await call
    except TFServingError as exc:
        await context.abort(exc.code, str(exc))
        raise  # (context.abort raises first)
    except _ResponseError as exc:
        await abort(context, exc.response)
    except (MLServeError, NotImplementedError) as exc:
        status = status_of(exc)
        shown = server.log_error(exc, status, error_body(exc)["error"])
        await context.abort(grpc_code(status), shown or str(exc))
        raise  # (context.abort raises first)


# ---- PredictionService -----------------------------------------------------------------


def _check_inputs(given: list[str], declared: list[str]) -> None:
    """TF Serving's checks of a request's input aliases against the signature."""
    if not declared:
        return  # a V2 model that declares no inputs takes any
    if len(given) != len(declared):
        extra, missing = sorted(set(given) - set(declared)), sorted(set(declared) - set(given))
        raise _invalid(
            f"input size does not match signature: {len(given)}!={len(declared)} "
            f"len({{{','.join(sorted(given))}}}) != len({{{','.join(sorted(declared))}}}). "
            f"Sent extra: {{{','.join(extra)}}}. Missing but required: {{{','.join(missing)}}}."
        )
    for alias in given:
        if alias not in declared:
            raise _invalid(
                f"input tensor alias not found in signature: {alias}. "
                f"Inputs expected to be in the set {{{','.join(sorted(declared))}}}."
            )


def _check_outputs(wanted: list[str], declared: list[str]) -> None:
    seen: set[str] = set()
    for alias in wanted:
        if declared and alias not in declared:
            raise _invalid(
                f"output tensor alias not found in signature: {alias} "
                f"Outputs expected to be in the set {{{','.join(sorted(declared))}}}."
            )
        if alias in seen:
            raise _invalid(f"duplicate output tensor alias: {alias}")
        seen.add(alias)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer, _Calls):
    """``tensorflow.serving.PredictionService`` over a GraphServer."""

    async def Predict(
        self, request: predict_pb2.PredictRequest, context: ServicerContext
    ) -> predict_pb2.PredictResponse:
        return await _answer(self.server, context, self._predict(request))

    async def _predict(self, request: predict_pb2.PredictRequest) -> predict_pb2.PredictResponse:
        router, key, model = self.resolve(request.model_spec)
        name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        signature = self.signature(model, name, PREDICT)
        declared_in = list(signature.get("inputs") or {})
        declared_out = list(signature.get("outputs") or {})
        _check_inputs(list(request.inputs), declared_in)
        wanted = list(request.output_filter)
        _check_outputs(wanted, declared_out)
        inputs = [tensor_to_core(alias, proto) for alias, proto in request.inputs.items()]
        outputs = await self.infer(router, key, model, name, inputs)
        response = predict_pb2.PredictResponse(model_spec=_spec(model, name))
        for alias in wanted or list(outputs):
            obj = outputs[alias]
            response.outputs[alias].CopyFrom(tensor_proto(decode_tensor(obj), obj["datatype"]))
        return response

    async def GetModelMetadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest, context: ServicerContext
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        return await _answer(self.server, context, self._metadata(request))

    async def _metadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        fields = list(request.metadata_field)
        if not fields:
            raise _invalid("GetModelMetadataRequest must specify at least one metadata_field")
        for field in fields:
            if field != "signature_def":
                raise _invalid(f"Metadata field {field} is not supported")
        _, _, model = self.resolve(request.model_spec)
        defs = get_model_metadata_pb2.SignatureDefMap()
        json_format.ParseDict({"signature_def": self.signature_defs(model)}, defs)
        packed = any_pb2.Any()
        packed.Pack(defs)
        response = get_model_metadata_pb2.GetModelMetadataResponse(model_spec=_spec(model, ""))
        response.metadata["signature_def"].CopyFrom(packed)
        return response

    async def Classify(
        self, request: classification_pb2.ClassificationRequest, context: ServicerContext
    ) -> classification_pb2.ClassificationResponse:
        return await _answer(self.server, context, self._classify(request))

    async def _classify(
        self, request: classification_pb2.ClassificationRequest
    ) -> classification_pb2.ClassificationResponse:
        spec, outputs, count = await self._run_examples(request.model_spec, request.input, CLASSIFY)
        response = classification_pb2.ClassificationResponse(model_spec=spec)
        _classifications(outputs, count, response.result)
        return response

    async def Regress(
        self, request: regression_pb2.RegressionRequest, context: ServicerContext
    ) -> regression_pb2.RegressionResponse:
        return await _answer(self.server, context, self._regress(request))

    async def _regress(
        self, request: regression_pb2.RegressionRequest
    ) -> regression_pb2.RegressionResponse:
        spec, outputs, count = await self._run_examples(request.model_spec, request.input, REGRESS)
        response = regression_pb2.RegressionResponse(model_spec=spec)
        _regressions(outputs, count, response.result)
        return response

    async def MultiInference(
        self, request: inference_pb2.MultiInferenceRequest, context: ServicerContext
    ) -> inference_pb2.MultiInferenceResponse:
        return await _answer(self.server, context, self._multi(request))

    async def _multi(
        self, request: inference_pb2.MultiInferenceRequest
    ) -> inference_pb2.MultiInferenceResponse:
        tasks = list(request.tasks)
        if not tasks:
            raise _invalid("Found no tasks in the MultiInferenceRequest")
        if len({task.model_spec.name for task in tasks}) > 1:
            raise _invalid(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name"
            )
        names = [task.model_spec.signature_name or DEFAULT_SIGNATURE for task in tasks]
        if len(set(names)) != len(names):
            raise _invalid("Duplicate evaluation of signature: " + names[0])
        response = inference_pb2.MultiInferenceResponse()
        for task in tasks:
            if task.method_name not in (CLASSIFY, REGRESS):
                raise _invalid(f"Unsupported signature method_name: {task.method_name}")
            spec, outputs, count = await self._run_examples(
                task.model_spec, request.input, task.method_name
            )
            result = response.results.add(model_spec=spec)
            if task.method_name == CLASSIFY:
                _classifications(outputs, count, result.classification_result)
            else:
                _regressions(outputs, count, result.regression_result)
        return response

    async def _run_examples(
        self, model_spec: model_pb2.ModelSpec, request_input: input_pb2.Input, method: str
    ) -> tuple[model_pb2.ModelSpec, dict[str, np.ndarray], int]:
        router, key, model = self.resolve(model_spec)
        name = model_spec.signature_name or DEFAULT_SIGNATURE
        signature = self.signature(model, name, method)
        aliases = list(signature.get("inputs") or {})
        if len(aliases) != 1:
            raise _invalid("Expected one input Tensor.")
        examples = _serialized_examples(request_input)
        array = np.empty(len(examples), dtype=object)
        array[:] = examples
        inputs = [encode_tensor(aliases[0], array, "BYTES", binary=True)]
        outputs = await self.infer(router, key, model, name, inputs)
        arrays = {alias: decode_tensor(obj) for alias, obj in outputs.items()}
        return _spec(model, name), arrays, len(examples)


def _serialized_examples(request_input: input_pb2.Input) -> list[bytes]:
    """The ``tensorflow.serving.Input`` as serialized ``tf.Example``s (context merged in)."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        return [example.SerializeToString() for example in request_input.example_list.examples]
    if kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        merged = []
        for example in listed.examples:
            combined = example_pb2.Example()
            combined.CopyFrom(listed.context)
            combined.MergeFrom(example)
            merged.append(combined.SerializeToString())
        if merged:
            return merged
    raise _invalid("Input is empty.")


def _class_output(outputs: dict[str, np.ndarray], alias: str, count: int) -> np.ndarray | None:
    array = outputs.get(alias)
    if array is None:
        return None
    if array.ndim != 2:
        raise _invalid(
            f"Expected Tensor shape: [batch_size num_classes] but got {list(array.shape)}"
        )
    if array.shape[0] != count:
        raise _invalid(f"Expected {alias} output batch size of {count}. Got: {array.shape[0]}")
    return array


def _classifications(
    outputs: dict[str, np.ndarray], count: int, result: classification_pb2.ClassificationResult
) -> None:
    classes = _class_output(outputs, "classes", count)
    scores = _class_output(outputs, "scores", count)
    if classes is None and scores is None:
        raise _invalid(
            'Expected classification signature outputs to contain at least one of "classes" '
            'or "scores".'
        )
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise _invalid(
            "Tensors class and score should match in dim_size(1). "
            f"Got {classes.shape[1]} vs. {scores.shape[1]}"
        )
    width = (classes if classes is not None else scores).shape[1]  # type: ignore[union-attr]
    for row in range(count):
        entry = result.classifications.add()
        for column in range(width):
            label = classes[row, column] if classes is not None else b""
            score = float(scores[row, column]) if scores is not None else 0.0
            entry.classes.add(
                label=label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label),
                score=score,
            )


def _regressions(
    outputs: dict[str, np.ndarray], count: int, result: regression_pb2.RegressionResult
) -> None:
    values = outputs.get("outputs")
    if values is None:
        raise _invalid('Expected regression signature outputs to contain "outputs".')
    if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
        raise _invalid(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{list(values.shape)}"
        )
    if values.shape[0] != count:
        raise _invalid(
            f"Input batch size did not match output batch size: {count} vs. {values.shape[0]}"
        )
    for value in values.reshape(count):
        result.regressions.add(value=float(value))


# ---- ModelService ----------------------------------------------------------------------

_STATE = get_model_status_pb2.ModelVersionStatus.State


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer, _Calls):
    """``tensorflow.serving.ModelService``: version status, and config reload (model control)."""

    async def GetModelStatus(
        self, request: get_model_status_pb2.GetModelStatusRequest, context: ServicerContext
    ) -> get_model_status_pb2.GetModelStatusResponse:
        return await _answer(self.server, context, self._status(request))

    async def _status(
        self, request: get_model_status_pb2.GetModelStatusRequest
    ) -> get_model_status_pb2.GetModelStatusResponse:
        spec = request.model_spec
        if not spec.name:
            raise _invalid("Missing ModelSpec name")
        version, label = _version_of(spec)
        router = getattr(self.server.graph, "object", None)
        try:
            if label:
                router, version = resolve_route(self.server, spec.name, None, label)
                version = version.partition(":")[2]
            hide = self.server.hide_errors
            found = model_status(router, spec.name, version, hide) if router is not None else None
        except ModelNotFound:
            found = None
        entries = list((found or {}).get("model_version_status", []))
        retiring = getattr(getattr(self.server, "repository", None), "retiring", {})
        listed = {entry["version"] for entry in entries}
        for name, number in list(retiring):
            if name == spec.name and str(number) not in listed and version in (None, str(number)):
                entries.append({"version": str(number), "state": "UNLOADING", "status": {}})
        if not entries:
            what = f"version {version} of model" if version else "any versions of model"
            raise TFServingError(grpc.StatusCode.NOT_FOUND, f"Could not find {what} {spec.name}")
        response = get_model_status_pb2.GetModelStatusResponse()
        for entry in entries:
            status = entry.get("status") or {}
            item = response.model_version_status.add(
                version=int(entry["version"]) if str(entry["version"]).isdigit() else 0,
                state=_STATE.Value(entry["state"]),
            )
            item.status.error_code = error_codes_pb2.Code.Value(status.get("error_code", "OK"))
            item.status.error_message = status.get("error_message", "")
        return response

    async def HandleReloadConfigRequest(
        self, request: model_management_pb2.ReloadConfigRequest, context: ServicerContext
    ) -> model_management_pb2.ReloadConfigResponse:
        return await _answer(self.server, context, self._reload(request))

    async def _reload(
        self, request: model_management_pb2.ReloadConfigRequest
    ) -> model_management_pb2.ReloadConfigResponse:
        if not self.server.model_control:
            raise Forbidden(
                "model control is off: this server does not load or unload models on request"
            )
        repository = getattr(self.server, "repository", None)
        if repository is None:
            raise TFServingError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "the server has no model repository to reload: serve a repository folder "
                "or a model config",
            )
        if request.config.WhichOneof("config") != "model_config_list":
            raise _invalid("ModelServerConfig must set model_config_list")
        root = repository.root or (
            repository.config_file.parent if repository.config_file else Path.cwd()
        )
        try:
            configs = configs_from_proto(request.config, root)
            confine(configs, root, [c.base_path for c in repository.configs.values()])
        except ValueError as exc:  # it may name the repository's folder
            raise _invalid(hidden(str(exc), 400) if self.server.hide_errors else str(exc)) from None
        await run_in_threadpool(repository.replace_config, configs)
        status = status_pb2.StatusProto(error_code=error_codes_pb2.OK)
        return model_management_pb2.ReloadConfigResponse(status=status)


def add_tfserving_services(server: GraphServer, grpc_server: grpc.aio.Server) -> None:
    """Register PredictionService and ModelService for ``server`` on ``grpc_server``."""
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(server), grpc_server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(server), grpc_server)
