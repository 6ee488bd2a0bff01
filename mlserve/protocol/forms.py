"""The two request forms (docs/models.md#request-forms), and the tensor responses built
from predict's result.

rows:    ``{"inputs": [...]}``: predict sees ``inputs`` exactly as sent.
tensors: ``{"inputs": [{"name", "shape", "datatype", "data"}, ...]}``: predict
         sees one ndarray (one input) or ``{name: ndarray}`` (several).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import numpy as np

from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.fastjson import FAST_BYTES, loads_tensors
from mlserve.protocol.tensors import (
    RAW,
    datatype_of,
    decode_tensor,
    encode_checked,
    encode_tensor,
    loads,
    plain_output,
    plain_tensor,
)

__all__ = [
    "InferenceRequest",
    "build_outputs",
    "check_declared_inputs",
    "check_declared_rows",
    "decode_request",
    "is_json_type",
    "is_tensor_inputs",
    "parse_json_body",
    "wants_binary",
]

JSON_TYPES = ("", "application/json", "text/json", "json")

# The JSON content types as a client declares them: bad JSON under these is a 400.
_DECLARED_JSON = frozenset(JSON_TYPES) - {""}

_TENSOR_KEYS = ("name", "shape", "datatype")


def parse_json_body(body: object, content_type: str) -> Any:
    """A str/bytes body parsed as JSON when the content type is empty or JSON.

    Bad JSON is a 400 only when the content type says JSON; with no content
    type, and with any other content type, the raw body is kept.
    """
    if type(body) is bytes and content_type in _DECLARED_JSON and len(body) < FAST_BYTES:
        return loads(body)  # the common body: small, declared JSON (errors are loads' own)
    if not isinstance(body, (str, bytes, bytearray, memoryview)) or not is_json_type(content_type):
        return body
    try:
        return loads_tensors(body)  # big tensor data straight to numpy
    except InvalidInput:
        if content_type:
            raise
        return body


def is_json_type(content_type: str | None) -> bool:
    """True for JSON content types, and for none at all (JSON is the default)."""
    return (content_type or "").split(";")[0].strip().lower() in JSON_TYPES


def is_tensor_inputs(inputs: object) -> TypeGuard[list[dict[str, Any]]]:
    """True when every element of ``inputs`` is a V2 tensor object."""
    if not isinstance(inputs, list) or not inputs:
        return False
    for obj in inputs:  # a loop, not all() over generators: this runs twice per request
        if not isinstance(obj, dict) or "name" not in obj or "shape" not in obj:
            return False
        if "datatype" not in obj:
            return False
    return True


class InferenceRequest(dict[str, Any]):
    """A tensor-form request: ``inputs`` decoded, the decoded tensors and the
    original objects kept beside it for code that wants them."""

    tensors: dict[str, np.ndarray]
    input_objects: list[dict[str, Any]]


def decode_request(body: dict[str, Any]) -> dict[str, Any]:
    """The request predict sees: tensor form decoded, rows form as it came."""
    inputs = body.get("inputs")
    if type(inputs) is list and inputs:
        first = inputs[0]
        if type(first) is list:
            return body  # rows of values (mlrun's form): neither tensors nor meant as tensors
        if type(first) is dict and len(inputs) == 1:
            array = plain_tensor(first)
            if array is not None:
                # One common tensor: what the code below gives (_request, inline), the
                # tensor not decoded twice.
                _check_parameters(body)
                request = InferenceRequest(body)
                request.tensors = {first["name"]: array}
                request.input_objects = inputs
                request["inputs"] = array
                return request
    if not is_tensor_inputs(inputs):
        if _meant_as_tensors(inputs):
            _check_tensor_keys(inputs)
        return body
    _check_parameters(body)
    tensors: dict[str, np.ndarray] = {}
    for obj in inputs:
        name = str(obj["name"])
        if name in tensors:
            raise InvalidInput(f"input '{name}' is given twice")
        tensors[name] = decode_tensor(obj)
    value = next(iter(tensors.values())) if len(tensors) == 1 else tensors
    return _request(body, inputs, tensors, value)


def _request(
    body: dict[str, Any],
    inputs: list[dict[str, Any]],
    tensors: dict[str, np.ndarray],
    value: object,
) -> InferenceRequest:
    """What predict sees: ``value`` (one array, or ``tensors`` when several) as ``inputs``."""
    request = InferenceRequest(body)
    request.tensors = tensors
    request.input_objects = inputs
    request["inputs"] = value
    return request


def _check_parameters(body: dict[str, Any]) -> None:
    """Request and requested-output ``parameters`` are objects: a 400 here, not a 500 later."""
    if "outputs" not in body and ("parameters" not in body or type(body["parameters"]) is dict):
        return  # the common requests: no output named, the request's parameters (if any) an object
    params = body.get("parameters")
    if params is not None and not isinstance(params, dict):
        _refuse_parameters("the request", params)
    outputs = body.get("outputs")
    if isinstance(outputs, list):
        for obj in outputs:  # a loop, no list of places: tritonclient names its outputs
            if isinstance(obj, dict):
                params = obj.get("parameters")
                if params is not None and not isinstance(params, dict):
                    _refuse_parameters(f"output {obj.get('name')!r}", params)


def _refuse_parameters(where: str, params: object) -> None:
    raise InvalidInput(f"'parameters' of {where} must be an object, got {type(params).__name__}")


def _meant_as_tensors(inputs: object) -> TypeGuard[list[dict[str, Any]]]:
    """Objects that all carry a ``datatype`` are tensors, even with keys missing
    (rows of plain records carry no ``datatype``)."""
    return (
        isinstance(inputs, list)
        and bool(inputs)
        and all(isinstance(obj, dict) and "datatype" in obj for obj in inputs)
    )


def _check_tensor_keys(inputs: list[dict[str, Any]]) -> None:
    for index, obj in enumerate(inputs):
        missing = [key for key in _TENSOR_KEYS if key not in obj]
        if missing:
            name = obj.get("name", f"#{index}")
            raise InvalidInput(f"input tensor '{name}' is missing {', '.join(missing)}")


def shape_matches(expected: list[int], got: tuple[int, ...]) -> bool:
    if len(expected) != len(got):
        return False
    return all(e in (-1, g) for e, g in zip(expected, got, strict=True))


def check_declared_inputs(
    tensors: Mapping[str, np.ndarray],
    declared: list[dict[str, Any]],
    exact_names: bool = False,
    model: str = "",
) -> None:
    """Check decoded tensors against the model's declared inputs; the errors begin with
    Triton's words (docs/protocol.md#errors), naming ``model`` when given.

    One declared input takes one tensor of any name unless ``exact_names`` (a
    ``V2ModelServer`` declares its names itself; a Keras signature's are generated)."""
    by_name = {spec["name"]: spec for spec in declared}
    if len(tensors) != len(declared):
        named = exact_names or len(declared) > 1
        missing = named or len(tensors) > 1  # one tensor of any name stands for one input
        detail = [f"missing input '{n}'" for n in by_name if missing and n not in tensors]
        detail += [f"unexpected input '{n}'" for n in tensors if named and n not in by_name]
        raise InvalidInput(
            f"expected {len(declared)} inputs but got {len(tensors)} inputs{_for(model)}"
            + (f": {', '.join(detail)}" if detail else "")
        )
    for name in tensors:
        if name not in by_name and (exact_names or len(declared) > 1):
            raise InvalidInput(
                f"unexpected input '{name}', the model's inputs are {sorted(by_name)}"
            )
    for spec in declared:
        name = spec["name"]
        array = tensors.get(name)
        if array is None:  # the one declared input, sent under another name
            array = next(iter(tensors.values()))
        _check_one(name, array, spec, model)


def _for(model: str) -> str:
    return f" for model '{model}'" if model else ""


def check_declared_rows(rows: list[Any], declared: list[dict[str, Any]]) -> None:
    """Rows (``{"inputs": [[...], ...]}``) against a model's single declared input: text
    where numbers are declared is refused as the tensor form refuses it (a JSON number
    fits any numeric datatype); rows of its rank must fit its shape. Rows of another
    rank are the model's to read (a flat list of one instance, a framework's own batching)."""
    if len(declared) != 1:
        return
    try:
        array = np.asarray(rows)
    except ValueError:  # ragged rows: the model's own code decides
        return
    datatype = declared[0].get("datatype")
    if datatype and datatype != "BYTES" and array.dtype.kind in "US":  # rows of dicts: the model's
        raise InvalidInput(
            f"input '{declared[0]['name']}' has datatype {datatype_of(array)}, expected {datatype}"
        )
    if declared[0].get("shape") is None:
        return
    shape = list(declared[0]["shape"])
    same_rank = array.dtype.kind in "biuf" and array.ndim == len(shape)
    if same_rank and not shape_matches(shape, array.shape):
        raise InvalidInput(
            f"input '{declared[0]['name']}' has shape {list(array.shape)}, expected {shape}"
        )


def _check_one(name: str, array: np.ndarray, spec: dict[str, Any], model: str) -> None:
    datatype = spec.get("datatype")
    if datatype and datatype_of(array) != datatype and not _compatible(datatype, array):
        raise InvalidInput(f"input '{name}' has datatype {datatype_of(array)}, expected {datatype}")
    shape = spec.get("shape")
    if shape is not None and not shape_matches(list(shape), array.shape):
        raise InvalidInput(
            f"unexpected shape for input '{name}'{_for(model)}. "
            f"Expected {_dims(shape)}, got {_dims(array.shape)}"
        )


def _dims(shape: Any) -> str:
    """A shape as Triton writes it: ``[-1,3]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def _compatible(datatype: str, array: np.ndarray) -> bool:
    # BF16 decodes to float32, so a BF16 tensor may stand for a declared BF16 input.
    return datatype == "BF16" and array.dtype == np.float32


def wants_binary(request: Mapping[str, Any], name: str) -> bool:
    """Whether output ``name`` goes back in binary form (the binary data extension)."""
    for obj in request.get("outputs") or ():
        if isinstance(obj, dict) and obj.get("name") == name:
            binary = (obj.get("parameters") or {}).get("binary_data")
            if binary is not None:
                return bool(binary)
    params = request.get("parameters")
    return bool(params.get("binary_data_output", False)) if params else False


def _requested_names(request: Mapping[str, Any]) -> list[str]:
    outputs = request.get("outputs")
    if outputs is None:
        return []
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and "name" in o for o in outputs
    ):
        raise InvalidInput("'outputs' must be a list of objects with a 'name'")
    return [str(o["name"]) for o in outputs]


def build_outputs(
    result: object, request: Mapping[str, Any], default_name: str
) -> list[dict[str, Any]]:
    """Output tensors from predict's result: an array-like (one tensor), a
    dict ``{name: array-like}``, or a list of tensor objects (passed through)."""
    outputs = request.get("outputs")
    if type(result) is np.ndarray and (outputs is None or _names_only(outputs, default_name)):
        # The common answer, one array, no output named or that one by its name (as
        # tritonclient asks): what the general code gives, without its tables of names.
        if outputs is None:  # wants_binary of no named output reads the parameters alone
            params = request.get("parameters")
            binary = params and params.get("binary_data_output")  # only its truth is read
        else:
            binary = wants_binary(request, default_name)
        obj = plain_output(default_name, result, binary)  # encode_tensor's own first try
        return [encode_checked(default_name, result, None, binary) if obj is None else obj]
    tensors: dict[str, Any]
    if isinstance(result, np.ndarray):  # the common answer, without the ABC check below
        tensors = {default_name: result}
    elif is_tensor_inputs(result):
        tensors = {str(obj["name"]): obj for obj in result}
    elif isinstance(result, Mapping):
        tensors = {str(name): value for name, value in result.items()}
    else:
        tensors = {default_name: result}
    requested = _requested_names(request)
    if requested:
        unknown = [name for name in requested if name not in tensors]
        if unknown:
            raise InvalidInput(
                f"unknown requested output(s) {unknown}, the model outputs {sorted(tensors)}"
            )
        tensors = {name: tensors[name] for name in requested}
    return [_encode(name, value, wants_binary(request, name)) for name, value in tensors.items()]


def _names_only(outputs: object, name: str) -> bool:
    """Whether the requested ``outputs`` are the one output ``name``."""
    if type(outputs) is not list or len(outputs) != 1:
        return False
    first = outputs[0]
    return type(first) is dict and first.get("name") == name


def _encode(name: str, value: object, binary: bool) -> dict[str, Any]:
    if isinstance(value, dict) and "datatype" in value:
        if binary and RAW not in value and "data" in value:
            return encode_tensor(name, decode_tensor(value), value["datatype"], binary=True)
        return value
    return encode_tensor(name, value, binary=binary)
