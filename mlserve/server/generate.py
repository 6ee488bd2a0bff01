"""Triton's generate extension (docs/protocol.md#generate-and-generate_stream):

    POST /v2/models/<m>[/versions/<v>]/generate         one answer, generate form
    POST /v2/models/<m>[/versions/<v>]/generate_stream  server-sent events of them

A generate body is flat JSON: each field an input by name (``{"text_input": "hi"}``),
``parameters`` the request's parameters and ``id`` its id. It is turned into a V2
tensor request and answered by the model's ``infer`` (``infer_stream`` for
``generate_stream``) on the ordinary road, limits and monitoring included; each
answer goes back flat: ``{"model_name", "model_version", <output>: value}``, a
one-element output as its value. A body with an ``inputs`` list is a V2 request
already (MLServer's generate and generate_stream) and is answered in V2 form.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only
from mlserve.core.streams import ChunkStream
from mlserve.graph.routers import ModelRouter
from mlserve.protocol.errors import InvalidInput, MLServeError
from mlserve.protocol.tensors import loads
from mlserve.server.serving import Serving

__all__ = ["generate_answer", "generate_handler", "generate_request", "joined"]

_PATH = re.compile(
    r"^(?P<model>/v2/models/[^/]+(?:/versions/[^/]+)?)/(?P<op>generate|generate_stream)/?$"
)
_NOT_INPUTS = frozenset({"id", "parameters"})
_SCALARS = (str, bool, int, float)
_NAMES = frozenset({"id", "model_name", "model_version"})  # an answer's, not an output's


@answers_only(lambda method, path: method == "POST" and "/generate" in path)
async def generate_handler(server: Serving, event: Event) -> Response | None:
    """A ``GraphServer`` handler: answers the generate routes, None for other paths."""
    match = _PATH.match(event.path or "")
    if match is None:
        return None
    body = event.body
    if isinstance(body, (bytes, bytearray, memoryview, str)):
        body = loads(body) if body else None  # JSON whatever the Content-Type (curl -d)
    if not isinstance(body, dict):
        raise InvalidInput("a generate request is a JSON object of inputs by name")
    streamed = match["op"] == "generate_stream"
    v2_form = isinstance(body.get("inputs"), list)
    if not v2_form:
        body = generate_request(body, _declared(server, event.path or ""))
    # generate form: always the stream, so that a one-shot generate can join a text
    path = match["model"] + ("/infer" if v2_form and not streamed else "/infer_stream")
    call = Event(body, "application/json", event.headers, "POST", path, event.id, event.trigger)
    answer = await server.run_async(call)
    if v2_form or answer.status_code != 200:
        return answer  # an error is {"error": ...} already, as Triton's generate answers it
    request_id = body.get("id")
    stream = answer.body.map(lambda chunk: generate_answer(chunk, request_id))
    if streamed:
        return Response(stream, 200, ChunkStream.media_type)
    try:
        forms = [form async for form in stream]
    except Exception as exc:  # an error after the first chunk: the call failed
        return server.error_response(exc, event.path or "")
    return Response(joined(forms) if forms else _no_output(match["model"], request_id))


def _no_output(model_path: str, request_id: object) -> dict[str, Any]:
    """The one-shot answer of a stream of no chunk: the model's name and version only."""
    parts = model_path.split("/")  # "" v2 models <m> [versions <v>]
    version = parts[5] if len(parts) == 6 else ""
    answer = {"model_name": parts[3], "model_version": version, "outputs": []}
    return generate_answer(answer, request_id)


def _declared(server: Serving, path: str) -> dict[str, dict[str, Any]]:
    """The inputs the addressed model declares in its metadata, by name ({} when none
    or when the model is unknown: the V2 call answers that)."""
    router = getattr(server.graph, "object", None)
    if not isinstance(router, ModelRouter):
        return {}
    parts = path.strip("/").split("/")  # v2 models <m> [versions <v>] <op>
    try:
        key = f"{parts[2]}:{parts[4]}" if len(parts) == 6 else router.resolve_key(parts[2])
    except MLServeError:
        return {}
    model = getattr(router.routes.get(key), "object", None)
    declared = getattr(model, "inputs", None) or []
    return {spec["name"]: spec for spec in declared if isinstance(spec, dict) and "name" in spec}


def generate_request(body: dict[str, Any], declared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A generate body as a V2 tensor request. A field is an input of the model's
    declared datatype and rank when it declares one: a string is BYTES [1], a number
    INT64 or FP64 [1], a boolean BOOL [1], a list [len] (nested lists: their shape).
    A scalar field a model that declares its inputs does not declare is a parameter."""
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput('"parameters" must be a JSON object')
    parameters = dict(parameters)
    inputs: list[dict[str, Any]] = []
    for name, value in body.items():
        if name in _NOT_INPUTS:
            continue
        spec = declared.get(name)
        if declared and spec is None and isinstance(value, _SCALARS):
            parameters[name] = value
            continue
        shape, data = _shape_and_data(name, value)
        datatype = str(spec["datatype"]) if spec and spec.get("datatype") else _datatype(name, data)
        rank = len(spec.get("shape") or []) if spec else 0
        shape = [1] * (rank - len(shape)) + shape  # a batch of one where the model has one
        inputs.append({"name": name, "datatype": datatype, "shape": shape, "data": data})
    if not inputs:
        raise InvalidInput("a generate request needs at least one input, such as text_input")
    request: dict[str, Any] = {"inputs": inputs}
    if parameters:
        request["parameters"] = parameters
    if "id" in body:
        request["id"] = body["id"]
    return request


def _shape_and_data(name: str, value: object) -> tuple[list[int], list[Any]]:
    """A field's shape and flat data: a scalar is [1]; lists nest to a rectangle."""
    if isinstance(value, _SCALARS):
        return [1], [value]
    if not isinstance(value, list):
        kind = "null" if value is None else type(value).__name__
        raise InvalidInput(
            f"generate input '{name}' must be a string, number, boolean or list, not {kind}"
        )
    if value and all(isinstance(item, list) for item in value):
        parts = [_shape_and_data(name, item) for item in value]
        if any(shape != parts[0][0] for shape, _ in parts):
            raise InvalidInput(f"generate input '{name}' is a ragged list")
        return [len(value), *parts[0][0]], [x for _, data in parts for x in data]
    if not all(isinstance(item, _SCALARS) for item in value):
        raise InvalidInput(f"generate input '{name}' mixes lists and values")
    return [len(value)], list(value)


def _datatype(name: str, data: list[Any]) -> str:
    kinds = {type(item) for item in data}
    if not kinds or kinds <= {int, float}:
        return "INT64" if kinds == {int} else "FP64"
    if kinds == {str}:
        return "BYTES"
    if kinds == {bool}:
        return "BOOL"
    raise InvalidInput(f"generate input '{name}' mixes strings, numbers and booleans")


def generate_answer(answer: Any, request_id: object = None) -> dict[str, Any]:
    """A V2 answer (or one chunk of a stream) in generate form: the model's name and
    version, then each output by name, a one-element output as its value."""
    if not isinstance(answer, dict):
        return {"outputs": answer}
    form: dict[str, Any] = {}
    if request_id is not None:
        form["id"] = request_id
    form["model_name"] = answer.get("model_name", "")
    form["model_version"] = answer.get("model_version", "")
    outputs = answer.get("outputs")
    if not isinstance(outputs, list) or not all(
        isinstance(output, dict) and "name" in output for output in outputs
    ):
        form["outputs"] = outputs  # rows, not tensors: as the model answered them
        return form
    for output in outputs:
        data = output.get("data")
        if isinstance(data, np.ndarray):
            data = data.ravel().tolist()
        form[output["name"]] = data[0] if isinstance(data, list) and len(data) == 1 else data
    return form


def joined(forms: list[dict[str, Any]]) -> dict[str, Any]:
    """A one-shot ``generate`` of a stream: its chunks' forms as one, each output's
    texts joined into one text (a generative model's tokens), other values listed."""
    if len(forms) == 1:
        return forms[0]
    answer: dict[str, Any] = {}
    for form in forms:
        for name, value in form.items():
            if name in _NAMES or name not in answer:
                answer[name] = value if name in _NAMES else [value]
            else:
                answer[name].append(value)
    for name, values in answer.items():
        if name not in _NAMES and all(isinstance(value, str) for value in values):
            answer[name] = "".join(values)
    return answer
