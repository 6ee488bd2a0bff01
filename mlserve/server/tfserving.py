"""TensorFlow Serving's REST API (``/v1``), answered by the graph server
(docs/tensorflow.md#the-v1-rest-api).

    GET  /v1/models/<m>[/versions/<v>|/labels/<l>]            version status
    GET  /v1/models/<m>[/versions/<v>|/labels/<l>]/metadata   signature_def
    POST /v1/models/<m>[/versions/<v>|/labels/<l>]:predict    inference
    POST /v1/models/<m>[/versions/<v>|/labels/<l>]:explain    KServe's v1 explanation

A predict request is turned into a V2 tensor request for the route ``m:v``
and runs through the graph like any other (validation, batching, logging),
then its outputs are written back the way TF Serving writes them:
``instances`` (row form) answers ``predictions``, ``inputs`` (columnar form)
answers ``outputs``. ``{"b64": ...}`` values are decoded to bytes, and bytes
outputs are text when they are UTF-8 (``{"b64": ...}`` otherwise, and always
for outputs named ``*_bytes``). ``signature_name`` selects a signature. NaN and
infinities are read as TF Serving reads them (bare tokens) and written by the
server's rule (docs/protocol.md#nan-and-infinities: bare, as TF Serving, by default).

Versions resolve through the model router (``m:v`` route keys; no version is
the highest); a label resolves through ``server.repository.resolve_label(
model, label) -> version`` when the server has a repository, else it is a 404.
Errors are ``{"error": ...}`` with the status of their class (400 bad input,
404 unknown model, version or label, 503 not ready, 501 classify/regress).

``:explain`` is KServe's v1 route (docs/explain.md#kserve-v1): its ``instances`` go to
the model's V2 ``explain`` as rows, and the SHAP answer comes back per instance.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import numpy as np

from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only, suspends_for
from mlserve.core.hidden import hidden
from mlserve.graph.routers import BaseModelRouter, sorted_versions
from mlserve.protocol.errors import InvalidInput, ModelNotFound, ModelNotReady, NotSupported
from mlserve.protocol.tensors import DATATYPES, decode_tensor, encode_tensor, loads
from mlserve.server.serving import Serving

__all__ = [
    "infer_path",
    "model_status",
    "ready_model",
    "resolve_route",
    "signature_defs",
    "tfserving_handler",
]

PREFIX = "/v1/models/"
_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<tail>/metadata|/gen_json|/gen_client|:[A-Za-z]+)?/?$"
)

# V2 datatype -> TensorFlow DataType enum name, for metadata of non-TF models
DT_NAMES = {
    "BOOL": "DT_BOOL",
    "UINT8": "DT_UINT8",
    "UINT16": "DT_UINT16",
    "UINT32": "DT_UINT32",
    "UINT64": "DT_UINT64",
    "INT8": "DT_INT8",
    "INT16": "DT_INT16",
    "INT32": "DT_INT32",
    "INT64": "DT_INT64",
    "FP16": "DT_HALF",
    "FP32": "DT_FLOAT",
    "FP64": "DT_DOUBLE",
    "BF16": "DT_BFLOAT16",
    "BYTES": "DT_STRING",
}


@answers_only(lambda method, path: path.startswith(PREFIX))
@suspends_for(lambda event: event.method == "POST" and (event.path or "").startswith(PREFIX))
async def tfserving_handler(server: Serving, event: Event) -> Response | None:
    """A ``GraphServer`` handler: answers ``/v1/models/...``, None for other paths."""
    path = event.path or ""
    if not path.startswith(PREFIX):
        return None
    router = getattr(server.graph, "object", None)
    if not isinstance(router, BaseModelRouter) or router.url_prefix == PREFIX.rstrip("/"):
        return None  # no model router, or one that serves /v1/models itself
    match = _PATH.match(path)
    if match is None:
        raise ModelNotFound(f"illegal path {path}")
    model, tail = match["model"], match["tail"] or ""
    version = match["version"]
    if match["label"]:
        version = _resolve_label(server, model, match["label"])
    if tail == ":predict" and event.method == "POST":
        return await _predict_with_extras(server, router, event, _route_key(router, model, version))
    if tail == ":explain" and event.method == "POST":
        return Response(await _explain(server, router, event, _route_key(router, model, version)))
    if tail.startswith(":"):
        raise NotSupported(f"{tail[1:]} is not supported, use :predict or :explain")
    if event.method != "GET":
        raise InvalidInput(f"{event.method} {path} is not supported, use GET")
    if tail == "/metadata":
        return Response(_metadata(router, _route_key(router, model, version)))
    if tail in ("/gen_json", "/gen_client"):
        return _generated(event, router, _route_key(router, model, version), path, tail)
    return Response(_status(router, model, version, server.hide_errors))


def _resolve_label(server: Serving, model: str, label: str) -> str:
    resolve = getattr(getattr(server, "repository", None), "resolve_label", None)
    version = resolve(model, label) if resolve is not None else None
    if version is None:
        raise ModelNotFound(f"model {model} has no version labelled '{label}'")
    return str(version)


def _route_key(router: Any, model: str, version: str | None) -> str:
    if version is None:
        return str(router.resolve_key(model))
    key = f"{model}:{version}"
    if key not in router.routes:
        raise ModelNotFound(f"model {model} has no version {version}")
    return key


# ---- status and metadata -----------------------------------------------------------


def _status(router: BaseModelRouter, model: str, version: str | None, hide: bool) -> dict[str, Any]:
    """The served versions' states and, as TF Serving reports them, END for a repository
    version whose load failed (docs/tensorflow.md#the-v1-rest-api)."""
    failures = getattr(getattr(router, "repository", None), "load_failures", None)
    failed = failures(model) if failures is not None else {}
    statuses = {v: _ended(v, why, hide) for v, why in failed.items()}
    if version is not None:
        if version not in statuses:
            key = _route_key(router, model, version)
            statuses[version] = _version_status(key, router.routes[key].object, hide)
        return {"model_version_status": [statuses[version]]}
    named = [key for key in router.routes if key.partition(":")[0] == model]
    for key in [key for key in named if ":" in key] or named:  # an alias is no version
        statuses[key.partition(":")[2]] = _version_status(key, router.routes[key].object, hide)
    if not statuses:
        raise ModelNotFound(f"Could not find any versions of model {model}")
    return {"model_version_status": [statuses[v] for v in sorted_versions(list(statuses))]}


def _ended(version: str, reason: str, hide: bool) -> dict[str, Any]:
    message = hidden(reason) if hide else reason
    return {
        "version": version,
        "state": "END",
        "status": {"error_code": "UNKNOWN", "error_message": message},
    }


def _version_status(key: str, model: Any, hide: bool) -> dict[str, Any]:
    """A version's state; a failed load's text hidden when ``hide``
    (docs/security.md#errors-without-leaks)."""
    if model is None:  # a repository version not in memory (lazy loading): loads on use
        status = {"error_code": "OK", "error_message": ""}
        return {"version": key.partition(":")[2], "state": "START", "status": status}
    if model.ready:
        state, code, message = "AVAILABLE", "OK", ""
    elif model.error:
        state, code, message = "END", "UNKNOWN", hidden(model.error) if hide else model.error
    else:
        state, code, message = "LOADING", "OK", ""
    status = {"error_code": code, "error_message": message}
    return {"version": model.version, "state": state, "status": status}


def _metadata(router: BaseModelRouter, key: str) -> dict[str, Any]:
    model = _ready_model(router, key)
    defs = model.signature_defs() if hasattr(model, "signature_defs") else _signature_defs(model)
    spec = {"name": model.name, "signature_name": "", "version": model.version}
    return {"model_spec": spec, "metadata": {"signature_def": {"signature_def": defs}}}


def _signature_defs(model: Any) -> dict[str, Any]:
    """A ``serving_default`` signature from a model's declared inputs and outputs."""

    def tensors(declared: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            spec["name"]: {
                "dtype": DT_NAMES.get(spec.get("datatype", ""), "DT_INVALID"),
                "tensor_shape": {
                    "dim": [{"size": str(d), "name": ""} for d in spec.get("shape") or []],
                    "unknown_rank": spec.get("shape") is None,
                },
                "name": spec["name"],
            }
            for spec in declared
        }

    return {
        "serving_default": {
            "inputs": tensors(model.inputs),
            "outputs": tensors(model.outputs),
            "method_name": "tensorflow/serving/predict",
        }
    }


def _ready_model(router: BaseModelRouter, key: str) -> Any:
    model = router.routes[key].object
    if model is None:
        raise ModelNotReady(f"model {key} is not loaded yet: send it a request to load it")
    if not model.ready:
        raise ModelNotReady(f"model {key} is not ready: {model.error or 'loading'}")
    return model


# ---- predict -------------------------------------------------------------------------


async def _predict(
    server: Serving, router: BaseModelRouter, event: Event, key: str
) -> dict[str, Any]:
    body = event.body if isinstance(event.body, dict) else _loads(event.body or b"")
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object")
    model = _ready_model(router, key)
    signature = body.get("signature_name")
    declared = (
        model.signature(signature).inputs
        if signature and hasattr(model, "signature")
        else model.inputs
    )
    if "instances" in body and "inputs" in body:
        raise InvalidInput('send only one of "instances" (row form) or "inputs" (columnar form)')
    if "instances" in body:
        columns, row_form = _from_instances(_decode_b64(body["instances"]), declared), True
    elif "inputs" in body:
        columns, row_form = _from_columns(_decode_b64(body["inputs"]), declared), False
    else:
        raise InvalidInput('the request needs "instances" (row form) or "inputs" (columnar form)')
    event.body = _v2_request(columns, declared, signature)
    name, _, version = key.partition(":")
    event.path = (
        f"{router.url_prefix}/{name}" + (f"/versions/{version}" if version else "") + "/infer"
    )
    graph = server.graph
    assert graph is not None  # the handler found the router in it
    answer = (await graph.run_async(event)).body
    outputs = {o["name"]: (o["name"], decode_tensor(o)) for o in answer["outputs"]}
    if row_form:
        return {"predictions": _predictions(list(outputs.values()))}
    if len(outputs) == 1:
        return {"outputs": _json(*next(iter(outputs.values())))}
    return {"outputs": {name: _json(name, array) for name, array in outputs.values()}}


# TF Serving reads these non-finite numbers (rapidjson's NaN/Inf flag).
_NON_FINITE = (b"NaN", b"Infinity")


def _loads(data: bytes | bytearray | memoryview | str) -> Any:
    """The request JSON; ``NaN``, ``Infinity`` and ``-Infinity`` are numbers, as in TF Serving."""
    try:
        return loads(data)
    except InvalidInput:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if not any(token in raw for token in _NON_FINITE):
            raise
    try:
        return json.loads(raw)  # the standard library reads the three tokens
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"invalid JSON: {exc}") from None


def _decode_b64(value: object) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and "b64" in value:
            try:
                return base64.b64decode(value["b64"], validate=True)
            except (ValueError, TypeError):
                raise InvalidInput(f"bad base64 value {str(value['b64'])[:40]!r}") from None
        return {key: _decode_b64(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_decode_b64(item) for item in value]
    return value


def _single_name(declared: list[dict[str, Any]]) -> str:
    if len(declared) > 1:
        names = sorted(spec["name"] for spec in declared)
        raise InvalidInput(f"the model takes several inputs {names}: name them")
    return str(declared[0]["name"]) if declared else "inputs"


def _from_instances(instances: object, declared: list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(instances, str | bytes | int | float | bool):
        instances = [instances]  # a scalar is one instance
    if not isinstance(instances, list) or not instances:
        raise InvalidInput('"instances" must be a non-empty list (or one scalar instance)')
    if not all(isinstance(row, dict) for row in instances):
        return {_single_name(declared): instances}
    names = list(instances[0])
    for index, row in enumerate(instances):
        if sorted(row) != sorted(names):
            raise InvalidInput(
                f"instance {index} has inputs {sorted(row)}, expected {sorted(names)}"
            )
    return {name: [row[name] for row in instances] for name in names}


def _from_columns(inputs: object, declared: list[dict[str, Any]]) -> dict[str, Any]:
    if isinstance(inputs, dict):
        return inputs
    return {_single_name(declared): inputs}


def _v2_request(
    columns: dict[str, Any], declared: list[dict[str, Any]], signature: object
) -> dict[str, Any]:
    types = {spec["name"]: spec.get("datatype") for spec in declared}
    unknown = sorted(set(columns) - set(types)) if declared else []
    if unknown:
        raise InvalidInput(f"unknown input '{unknown[0]}': the signature takes {sorted(types)}")
    if len(declared) == 1 and len(columns) == 1:
        types = {next(iter(columns)): declared[0].get("datatype")}
    tensors = [
        encode_tensor(name, _array(name, value, types.get(name)), types.get(name), binary=True)
        for name, value in columns.items()
    ]
    parameters: dict[str, Any] = {"binary_data_output": True}
    if signature:
        parameters["signature_name"] = str(signature)
    return {"inputs": tensors, "parameters": parameters}


def _array(name: str, value: object, datatype: str | None) -> np.ndarray:
    try:
        if datatype == "BYTES" or (datatype is None and _has_text(value)):
            return np.array(value, dtype=object)
        array = np.asarray(value, dtype=DATATYPES[datatype] if datatype else None)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"input '{name}' is not a {datatype or 'numeric'} tensor: {exc}"
        ) from None
    if array.dtype == object:
        raise InvalidInput(f"input '{name}' is ragged or mixes types")
    return array


def _has_text(value: object) -> bool:
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, (str, bytes))


def _predictions(outputs: list[tuple[str, np.ndarray]]) -> list[Any]:
    if len(outputs) == 1:
        return _json(*outputs[0])
    rows = {len(array) if array.ndim else 1 for _, array in outputs}
    if len(rows) != 1:
        raise InvalidInput(
            'the outputs have different batch sizes: use the columnar form ("inputs")'
        )
    count = rows.pop()
    return [{name: _json(name, array[i]) for name, array in outputs} for i in range(count)]


def _json(name: str, value: object) -> Any:
    """TF Serving's JSON of an output (or of one row of it): bytes as text when UTF-8,
    else ``{"b64"}`` (always for ``*_bytes``); bytes are kept whole (trailing NULs too)."""
    always = name.endswith("_bytes")
    if isinstance(value, bytes | str):  # one row of a BYTES output
        return _bytes_json(value, always)
    array = np.asarray(value)
    if array.dtype != object:
        return array.tolist()
    return np.vectorize(lambda v: _bytes_json(v, always), otypes=[object])(array).tolist()


def _bytes_json(value: object, always_b64: bool) -> Any:
    if not isinstance(value, bytes):
        return value
    if not always_b64:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(value).decode("ascii")}


# ---- KServe's v1 explain --------------------------------------------------------------


async def _explain(
    server: Serving, router: BaseModelRouter, event: Event, key: str
) -> dict[str, Any]:
    """``:explain``: ``{"instances": [...]}`` asks the model's ``explain`` for its rows;
    the answer is ``{"explanations": [...]}``, one per instance."""
    body = event.body if isinstance(event.body, dict) else _loads(event.body or b"")
    if not isinstance(body, dict) or "instances" not in body:
        raise InvalidInput('the explain request needs "instances": a list of rows')
    instances = _decode_b64(body["instances"])
    if not isinstance(instances, list) or not instances:
        raise InvalidInput('"instances" must be a non-empty list of rows')
    _ready_model(router, key)
    event.body = {"inputs": instances}
    event.path = infer_path(router, key).removesuffix("/infer") + "/explain"
    graph = server.graph
    assert graph is not None  # the handler found the router in it
    answer = (await graph.run_async(event)).body
    outputs = answer.get("outputs") if isinstance(answer, dict) else answer
    return {"explanations": _explanations(outputs, len(instances))}


def _explanations(outputs: Any, rows: int) -> Any:
    """KServe v1's ``explanations`` of a row-form SHAP answer (``shap_values``: rows x
    features, or ``{class: rows x features}``; ``base_values``: one per class, or one list
    of them per row): one ``{"feature_names", "shap_values", "base_values"}`` per
    instance. Any other answer (a model's own ``explain``) is returned as it is."""
    if not isinstance(outputs, dict) or "shap_values" not in outputs:
        return outputs
    values, names = outputs["shap_values"], list(outputs.get("feature_names") or [])
    classes = list(values) if isinstance(values, dict) else []
    base: Any = outputs.get("base_values")
    answers = []
    for row in range(rows):
        row_base = base[row] if _per_row(base, rows) else base
        flat = [] if row_base is None else [float(v) for v in np.ravel(row_base)]
        item: dict[str, Any] = {"feature_names": names}
        if classes:
            item["shap_values"] = {c: values[c][row] for c in classes}
            item["base_values"] = dict(zip(classes, flat, strict=False))
        else:
            item["shap_values"] = values[row]
            item["base_values"] = flat[0] if flat else None
        answers.append(item)
    return answers


def _per_row(base: Any, rows: int) -> bool:
    """Whether ``base_values`` holds a list per row (``[rows, classes]``)."""
    return isinstance(base, list) and len(base) == rows and all(isinstance(b, list) for b in base)


# ---- Simple TensorFlow Serving's conveniences (mlserve.server.simple_tfs) -------------


def _declared_inputs(model: Any, signature: str | None) -> list[dict[str, Any]]:
    if signature and hasattr(model, "signature"):
        return list(model.signature(signature).inputs)
    return list(model.inputs)


def _generated(event: Event, router: BaseModelRouter, key: str, path: str, tail: str) -> Response:
    """``gen_json`` (an example request) or ``gen_client`` (a client sending it)."""
    from mlserve.server.simple_tfs import example_request, generate_client, query_value

    model = _ready_model(router, key)
    signature = query_value(event.query, "signature_name")
    body = example_request(_declared_inputs(model, signature), signature)
    if tail == "/gen_json":
        return Response(body)
    host = event.headers.get("host") or "127.0.0.1:8080"
    url = f"http://{host}{path[: -len(tail)]}:predict"
    language = query_value(event.query, "language", "python")
    source = generate_client(language, key.partition(":")[0], url, body)
    return Response(source.encode(), content_type="text/plain; charset=utf-8")


async def _predict_with_extras(
    server: Serving, router: BaseModelRouter, event: Event, key: str
) -> Response:
    """``:predict``, taking multipart image uploads and answering ``?verbose=true`` timings."""
    from time import perf_counter

    started = perf_counter()
    content_type = (event.content_type or "").lower()
    if content_type.startswith("multipart/form-data"):
        from mlserve.server.simple_tfs import parse_upload

        if not isinstance(event.body, bytes | bytearray):
            raise InvalidInput("the multipart body must be sent as bytes")
        model = _ready_model(router, key)
        signature = getattr(model, "signature_name", None) if hasattr(model, "signature") else None
        event.body = parse_upload(
            bytes(event.body), event.content_type, _declared_inputs(model, signature)
        )
    if not event.query or "verbose" not in event.query:
        return Response(await _predict(server, router, event, key))
    from mlserve.server.simple_tfs import is_verbose

    if not is_verbose(event.query):
        return Response(await _predict(server, router, event, key))
    ready = perf_counter()
    body = await _predict(server, router, event, key)
    done = perf_counter()
    body["statistics"] = {
        "upload_ms": round((ready - started) * 1000, 3),
        "predict_ms": round((done - ready) * 1000, 3),
        "total_ms": round((done - started) * 1000, 3),
    }
    return Response(body)


# ---- shared with the gRPC face (mlserve.grpc.tfserving) ----------------------------


def resolve_route(
    server: Serving, model: str, version: str | None = None, label: str | None = None
) -> tuple[BaseModelRouter, str]:
    """The model router and the route key of ``model`` at a version, a label, or the highest."""
    router = getattr(server.graph, "object", None)
    if not isinstance(router, BaseModelRouter):
        raise ModelNotFound(f"the server has no model router to find model {model}")
    if label:
        version = _resolve_label(server, model, label)
    return router, _route_key(router, model, version)


def infer_path(router: BaseModelRouter, key: str) -> str:
    """The V2 infer path of a route key ``m[:v]``."""
    name, _, version = key.partition(":")
    return f"{router.url_prefix}/{name}" + (f"/versions/{version}" if version else "") + "/infer"


def ready_model(router: BaseModelRouter, key: str) -> Any:
    """The loaded, ready model of a route key (503 otherwise)."""
    return _ready_model(router, key)


def signature_defs(model: object) -> dict[str, Any]:
    """A model's SignatureDefs as JSON of the protos (a V2 model gets ``serving_default``)."""
    return model.signature_defs() if hasattr(model, "signature_defs") else _signature_defs(model)


def model_status(
    router: BaseModelRouter, model: str, version: str | None, hide: bool = False
) -> dict[str, Any]:
    """``{"model_version_status": [...]}`` of a model's served versions (``hide``: a
    failed load's text as a generic message with an error id)."""
    return _status(router, model, version, hide)
