"""gRPC messages <-> the core's V2 bodies: ``to_core`` / ``from_core`` pairs.

A request's ``raw_input_contents`` travel as each input's raw bytes (under
``RAW``); typed ``contents`` become ``data`` as a numpy array of the field's
own type (BYTES: a list of bytes), with no Python list in between; the codec
checks and casts it as it does JSON data. Outputs are always asked of the model
in binary form, then go back as ``raw_output_contents`` whatever the request's
form, as Triton answers and tritonclient reads them; a request whose
``typed_outputs`` parameter is true gets typed ``contents`` instead (a datatype
with no typed field stays raw): FP32 and FP64 bytes are already the packed wire
form of their field and are merged as they are; other types go through one
``tolist`` (docs/serving.md#grpc).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from google.protobuf import json_format

from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.shm import SHM_REGION
from mlserve.protocol.tensors import RAW, decode_raw, plain_binary

__all__ = [
    "config_from_core",
    "empty_final_response",
    "final_response_bytes",
    "in_shared_memory",
    "index_from_core",
    "infer_from_core",
    "infer_response_bytes",
    "infer_to_core",
    "metadata_from_core",
    "parameters_from_core",
    "parameters_to_core",
    "raw_outputs",
    "stats_from_core",
    "stream_error",
    "stream_response_bytes",
]

TYPED_OUTPUTS = "typed_outputs"  # the request parameter that asks for typed output contents
# Triton's stream parameters (docs/serving.md#streams-over-grpc): the request's ask for an
# empty response that ends a streamed answer, and each response's flag of the last one.
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
_FACE_PARAMETERS = (TYPED_OUTPUTS, EMPTY_FINAL)  # the face's, not the model's

# V2 datatype -> the InferTensorContents field that holds it (FP16, BF16: raw only).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}

# The numpy type of each numeric contents field (the protobuf type, before any narrowing).
FIELD_DTYPES: dict[str, np.dtype[Any]] = {
    "bool_contents": np.dtype(np.bool_),
    "int_contents": np.dtype(np.int32),
    "int64_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint32),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype(np.float32),
    "fp64_contents": np.dtype(np.float64),
}

# Up to this many values, ``np.fromiter`` is the fastest copy out of a repeated field;
# above it ``np.array`` (protobuf's upb containers hand numpy their values in C).
_FROMITER_MAX = 32

# FP32 and FP64 outputs: raw little-endian bytes are the packed field's payload, so
# ``tag + length + bytes`` merges in one C call (fp32_contents = 6, fp64_contents = 7).
# datatype -> (tag, item size).
_PACKED_TAGS = {"FP32": (b"\x32", 4), "FP64": (b"\x3a", 8)}

# V2 datatype -> (its contents field, that field's numpy type; None for BYTES: a list).
_TYPED_FIELDS = {
    datatype: (field, FIELD_DTYPES.get(field)) for datatype, field in CONTENTS_FIELD.items()
}

_NOT_TENSORS = "the model's answer is not a list of output tensors (gRPC serves tensors only)"


def parameters_to_core(parameters: Any) -> dict[str, Any]:
    """A ``map<string, InferParameter>`` as a plain dict."""
    return {
        key: getattr(value, value.WhichOneof("parameter_choice") or "string_param")
        for key, value in parameters.items()
    }


def parameters_from_core(values: dict[str, Any], target: Any) -> None:
    """Write plain values into a ``map<string, InferParameter>``."""
    for key, value in values.items():
        if isinstance(value, bool):
            target[key].bool_param = value
        elif isinstance(value, int):
            target[key].int64_param = value
        else:
            target[key].string_param = str(value)


def _input_to_core(tensor: Any, raw: bytes | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": tensor.name,
        "datatype": tensor.datatype,
        "shape": tensor.shape[:],  # a list: half the time of list(tensor.shape)
    }
    if tensor.parameters:
        obj["parameters"] = parameters_to_core(tensor.parameters)
    if raw is not None:
        obj[RAW] = raw
        return obj
    typed = _TYPED_FIELDS.get(obj["datatype"])
    if typed is None:
        raise InvalidInput(f"input '{tensor.name}': {tensor.datatype} needs raw_input_contents")
    field, dtype = typed
    values = getattr(tensor.contents, field)
    count = len(values)
    if dtype is None:
        obj["data"] = list(values)
    elif count <= _FROMITER_MAX:
        obj["data"] = np.fromiter(values, dtype, count)
    else:
        obj["data"] = np.array(values, dtype)
    return obj


def raw_outputs(request: Any) -> bool:
    """Whether a ``ModelInferRequest``'s outputs go back as ``raw_output_contents`` (unless
    its ``typed_outputs`` parameter is true); a ``typed_outputs`` that is not a bool is
    invalid."""
    return not _flag(request, TYPED_OUTPUTS)


def empty_final_response(request: Any) -> bool:
    """Whether a stream request asks for an empty response after a streamed answer's
    last (its ``triton_enable_empty_final_response``: a bool, as Triton checks)."""
    return _flag(request, EMPTY_FINAL)


def _flag(request: Any, name: str) -> bool:
    """A request's bool parameter ``name`` (False when absent); another type is invalid."""
    parameters = request.parameters
    if not parameters or name not in parameters:
        return False
    value = parameters[name]
    if value.WhichOneof("parameter_choice") != "bool_param":
        raise InvalidInput(f"the {name} parameter must be a bool")
    return bool(value.bool_param)


def infer_to_core(request: Any) -> dict[str, Any]:
    """A ``ModelInferRequest`` as the V2 tensor body the graph serves."""
    tensors = request.inputs
    raws = request.raw_input_contents
    if not raws:  # map, not a list comprehension: no Python frame of its own per request
        inputs = list(map(_input_to_core, tensors))
    elif len(raws) != len(tensors):
        raise InvalidInput(f"{len(raws)} raw_input_contents for {len(tensors)} inputs")
    else:
        inputs = list(map(_input_to_core, tensors, raws))
    if request.parameters:
        parameters = parameters_to_core(request.parameters)
        for name in _FACE_PARAMETERS:
            parameters.pop(name, None)
        parameters["binary_data_output"] = True
    else:  # the common request: no parameters of its own
        parameters = {"binary_data_output": True}
    body: dict[str, Any] = {"inputs": inputs, "parameters": parameters}
    if request.id:
        body["id"] = request.id
    if request.outputs:
        body["outputs"] = [
            {"name": o.name, "parameters": parameters_to_core(o.parameters)}
            for o in request.outputs
        ]
    return body


def in_shared_memory(obj: dict[str, Any]) -> bool:
    """An output the server wrote into a shared-memory region: no contents of its own
    (docs/protocol.md#system-shared-memory)."""
    return RAW not in obj and "data" not in obj and SHM_REGION in (obj.get("parameters") or ())


def _output_bytes(obj: dict[str, Any]) -> bytes:
    raw = obj.get(RAW)
    if raw is not None:
        return bytes(raw)
    if in_shared_memory(obj):
        return b""
    from mlserve.protocol.tensors import decode_tensor, encode_raw

    return encode_raw(decode_tensor(obj), obj["datatype"])


def _typed(tensor: Any, obj: dict[str, Any], raw: bytes) -> None:
    """Write one output's raw bytes into its typed contents field."""
    datatype = obj["datatype"]
    packed = _packed(datatype, len(raw))
    if packed is not None and math.prod(obj["shape"]) == packed[1]:
        tensor.contents.MergeFromString(packed[0] + raw)
        return
    array = decode_raw(raw, datatype, obj["shape"], obj["name"]).reshape(-1)
    getattr(tensor.contents, CONTENTS_FIELD[datatype]).extend(array.tolist())


@functools.lru_cache(maxsize=4096)  # output sizes repeat: one dict look-up, in C
def _packed(datatype: str, size: int) -> tuple[bytes, int] | None:
    """FP32 and FP64: the packed field's tag and length, the prefix of ``size`` raw bytes
    that makes them the field, and their element count; None for other datatypes."""
    tag = _PACKED_TAGS.get(datatype)
    if tag is None or size % tag[1]:
        return None
    return tag[0] + _varint(size), size // tag[1]


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    if value < 0x80:  # one byte: most lengths (tags, names, small tensors)
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


def infer_from_core(body: dict[str, Any], raw: bool) -> Any:
    """The model's V2 tensor response as a ``ModelInferResponse``."""
    response = pb.ModelInferResponse(
        model_name=str(body.get("model_name") or ""),
        model_version=str(body.get("model_version") or ""),
        id=str(body.get("id") or ""),
    )
    parameters = body.get("parameters")
    if isinstance(parameters, dict) and parameters:
        parameters_from_core(parameters, response.parameters)
    outputs = body.get("outputs")
    if type(outputs) is list and len(outputs) == 1:
        obj = outputs[0]
        # The model's usual answer (plain_binary): what the loop below gives, in fewer steps.
        data = plain_binary(obj)
        if data is not None:
            datatype = obj["datatype"]
            tensor = response.outputs.add(name=obj["name"], datatype=datatype, shape=obj["shape"])
            if raw or datatype not in CONTENTS_FIELD:
                response.raw_output_contents.append(data)
                return response
            packed = _packed(datatype, len(data))
            if packed is not None and math.prod(obj["shape"]) == packed[1]:
                tensor.contents.MergeFromString(packed[0] + data)  # _typed's merge, inline
            else:
                _typed(tensor, obj, data)
            return response
    if not isinstance(outputs, list):
        raise InvalidInput(_NOT_TENSORS)
    for obj in outputs:  # one loop, not all() and any() over generators: this runs per request
        if not isinstance(obj, dict) or "datatype" not in obj:
            raise InvalidInput(_NOT_TENSORS)
        if obj["datatype"] not in CONTENTS_FIELD:
            raw = True  # a datatype without a typed field: every output goes raw
    contents = [_output_bytes(obj) for obj in outputs]
    for obj, data in zip(outputs, contents, strict=True):
        tensor = response.outputs.add(
            name=obj["name"], datatype=obj["datatype"], shape=obj["shape"]
        )
        params = obj.get("parameters")
        if params and (len(params) != 1 or "binary_data_size" not in params):
            params = {k: v for k, v in params.items() if k != "binary_data_size"}
            parameters_from_core(params, tensor.parameters)
        if not raw and not in_shared_memory(obj):
            _typed(tensor, obj, data)
    if raw:
        response.raw_output_contents.extend(contents)
    return response


def infer_response_bytes(body: dict[str, Any], raw: bool) -> bytes:
    """``infer_from_core(body, raw).SerializeToString()``, byte for byte.

    For the model's usual answer (one tensor as plain_output encodes it, raw, or typed
    FP32 or FP64), what repeats from call to call (the model's name and version, the
    tensor's name, datatype and shape) is serialized by protobuf once and cached, and
    the call's id and bytes are joined to it as the length-delimited fields they are:
    no message is built. Any other answer is built and serialized by protobuf.
    """
    outputs = body.get("outputs")
    if type(outputs) is list and len(outputs) == 1 and not body.get("parameters"):
        obj = outputs[0]
        data = plain_binary(obj)
        if data:  # the model's usual answer, not empty
            name, version = body.get("model_name"), body.get("model_version") or ""
            call_id = body.get("id") or ""
            if type(name) is str and type(version) is str and type(call_id) is str:
                datatype, shape = obj["datatype"], obj["shape"]
                head, tensor = _heads(name, version, obj["name"], datatype, tuple(shape))
                if call_id:
                    encoded = call_id.encode()
                    head += b"\x1a" + _varint(len(encoded)) + encoded  # id = 3
                if raw or datatype not in CONTENTS_FIELD:  # raw_output_contents = 6
                    data = b"\x32" + _varint(len(data)) + data
                    return head + b"\x2a" + _varint(len(tensor)) + tensor + data
                packed = _packed(datatype, len(data))
                if packed is not None and math.prod(shape) == packed[1]:
                    contents = packed[0] + data  # the tensor's contents = 5
                    tensor += b"\x2a" + _varint(len(contents)) + contents
                    return head + b"\x2a" + _varint(len(tensor)) + tensor  # outputs = 5
    return infer_from_core(body, raw).SerializeToString()


def _final_flag(final: bool) -> bytes:
    """A ModelInferResponse's ``parameters`` holding only ``triton_final_response``, serialized:
    appended to a serialized response it merges into its parameters."""
    response = pb.ModelInferResponse()
    response.parameters[FINAL].bool_param = final
    return response.SerializeToString()


_FINAL_FLAGS = {final: _final_flag(final) for final in (False, True)}


def stream_response_bytes(body: dict[str, Any], raw: bool, final: bool) -> bytes:
    """A serialized ``ModelStreamInferResponse`` holding the core's answer ``body`` (as
    ``infer_response_bytes``), its ``triton_final_response`` parameter ``final``."""
    inner = infer_response_bytes(body, raw) + _FINAL_FLAGS[final]
    return b"\x12" + _varint(len(inner)) + inner  # infer_response = 2


def _request_head(request: Any) -> Any:
    """The ModelInferResponse that names ``request`` (model, version, id) and ends it."""
    response = pb.ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    response.parameters[FINAL].bool_param = True
    return response


def final_response_bytes(request: Any) -> bytes:
    """Triton's empty final response of a streamed answer, serialized: the request's
    model, version and id, ``triton_final_response`` true, no outputs."""
    return pb.ModelStreamInferResponse(infer_response=_request_head(request)).SerializeToString()


def stream_error(request: Any, message: str) -> Any:
    """The stream's answer to a failed request: its ``error_message``, and (as Triton) the
    request's model, version and id with ``triton_final_response`` true: nothing follows."""
    return pb.ModelStreamInferResponse(error_message=message, infer_response=_request_head(request))


@functools.lru_cache(maxsize=1024)
def _heads(
    model: str, version: str, name: str, datatype: str, shape: tuple[int, ...]
) -> tuple[bytes, bytes]:
    """The serialized start of a ModelInferResponse of ``model`` (its names) and of its
    output tensor (name, datatype, shape): the same for every call of that model."""
    head = pb.ModelInferResponse(model_name=model, model_version=version)
    tensor = pb.ModelInferResponse.InferOutputTensor(name=name, datatype=datatype, shape=shape)
    return head.SerializeToString(), tensor.SerializeToString()


def metadata_from_core(body: dict[str, Any]) -> Any:
    """Model metadata as a ``ModelMetadataResponse``."""

    def tensors(specs: Any) -> list[Any]:
        return [
            pb.ModelMetadataResponse.TensorMetadata(
                name=str(s.get("name", "")),
                datatype=str(s.get("datatype", "")),
                shape=[int(d) for d in s.get("shape") or []],
            )
            for s in specs or []
        ]

    properties = body.get("properties")  # a model's own (get_metadata), as strings
    if not isinstance(properties, dict):
        properties = {}
    return pb.ModelMetadataResponse(
        name=str(body.get("name", "")),
        versions=[str(v) for v in body.get("versions") or []],
        platform=str(body.get("platform") or ""),
        inputs=tensors(body.get("inputs")),
        outputs=tensors(body.get("outputs")),
        properties={str(k): str(v) for k, v in properties.items()},
    )


def _dims(shape: Any) -> list[int]:
    """Triton dims: -1 for every dimension that is not a fixed integer."""
    dims = []
    for d in shape or []:
        try:
            dims.append(int(d))
        except (TypeError, ValueError):
            dims.append(-1)
    return dims


def config_from_core(body: dict[str, Any]) -> Any:
    """The model configuration (Triton's JSON form) as a ``ModelConfig``."""
    config = pb.ModelConfig(
        name=str(body.get("name") or ""),
        platform=str(body.get("platform") or ""),
        backend=str(body.get("backend") or ""),
        max_batch_size=int(body.get("max_batch_size") or 0),
    )
    for field, specs in (("input", body.get("input")), ("output", body.get("output"))):
        for spec in specs or []:
            data_type = str(spec.get("data_type") or "TYPE_INVALID")
            getattr(config, field).add(
                name=str(spec.get("name", "")),
                data_type=pb.DataType.Value(data_type)
                if data_type in pb.DataType.keys()
                else pb.TYPE_INVALID,
                dims=_dims(spec.get("dims")),
            )
    for key, value in (body.get("parameters") or {}).items():
        config.parameters[key].string_value = str(value.get("string_value", ""))
    return config


def stats_from_core(body: dict[str, Any]) -> Any:
    """``{"model_stats": [...]}`` (Triton's JSON form) as a ``ModelStatisticsResponse``."""
    return json_format.ParseDict(body, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)


def index_from_core(entries: list[dict[str, Any]]) -> Any:
    """The repository index (a list of name, version, state, reason) as a response."""
    response = pb.RepositoryIndexResponse()
    for entry in entries:
        response.models.add(**{key: str(entry.get(key) or "") for key in _INDEX_FIELDS})
    return response


_INDEX_FIELDS = ("name", "version", "state", "reason")
