"""Server-level REST extensions, answered before the graph so that the mock
server and every face agree (docs/serving.md#the-url-surface):

    GET  /metrics                                   Prometheus text (mlserve's registry)
    GET  /openapi.json, /docs                       the OpenAPI document, browsable
    GET  /v2/models/stats                           statistics of every model
    GET  /v2/models/<m>[/versions/<v>]/stats        statistics of one model
    GET  /v2/models/<m>[/versions/<v>]/config       model configuration (Triton form)
    POST /v2/repository/index                       repository index
    POST /v2/repository/models/<m>/load|unload      repository load / unload (a load may
                                                    carry Triton's {"parameters": {"config"}})
    POST /v2/repository/models/<m>/weights          the weights of <m>'s versions (or a
                                                    load's {"parameters": {"weights"}})
    GET  /v2/models/<m>/traffic                     <m>'s weights, shadows and counts

Any other request costs one method check and one prefix check.
"""

from __future__ import annotations

import re
from typing import Any

from mlserve.batching import max_batch_size
from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only, suspends_for
from mlserve.core.version import __version__
from mlserve.graph.routers import highest_version
from mlserve.protocol.errors import Forbidden, InvalidInput, MLServeError, ModelNotFound
from mlserve.protocol.tensors import loads
from mlserve.server.repository import GraphRepository
from mlserve.server.serving import Serving
from mlserve.server.stats import find_models, model_stats
from mlserve.server.traffic import change_weights, traffic_of, weights_of_body

__all__ = ["check_model_name", "handle", "install", "load_overrides", "model_config", "one_model"]

_MODEL_GET = re.compile(
    r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/(?P<what>stats|config|traffic)$"
)
_REPOSITORY = re.compile(
    r"^/v2/repository/models/(?P<model>[^/]+)/(?P<action>load|unload|weights)$"
)
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def install(server: Serving) -> None:
    """Give ``server`` the extensions and, unless it has one, a repository over its graph."""
    if getattr(server, "repository", None) is None:
        server.repository = GraphRepository(server)
    if handle not in server.handlers:
        server.add_handler(handle)


def _loads_or_unloads(event: Event) -> bool:
    """Repository requests await their load; every other request is answered at once."""
    return event.method == "POST" and (event.path or "").startswith("/v2/repository/")


@answers_only(lambda method, path: method == "GET" or path.startswith("/v2/repository/"))
@suspends_for(_loads_or_unloads)
async def handle(server: Serving, event: Event) -> Response | None:
    path = event.path
    if event.method == "GET":
        if path.startswith("/v2/models/") or path in _GET_ROUTES:
            return _get(server, path.rstrip("/"))
        return None
    if event.method == "POST" and path.startswith("/v2/repository/"):
        return await _repository(server, event, path.rstrip("/"))
    return None


def _get(server: Serving, path: str) -> Response | None:
    static = _GET_ROUTES.get(path)
    if static is not None:
        return static(server)
    if path == "/v2/models/stats":
        return Response(model_stats(server))
    match = _MODEL_GET.match(path)
    if match is None:
        return None
    if match["what"] == "stats":
        return Response(model_stats(server, match["model"], match["version"]))
    if match["what"] == "traffic":
        return Response(traffic_of(server, match["model"]))
    return Response(model_config(one_model(server, match["model"], match["version"])))


def _metrics(server: Serving) -> Response:
    from prometheus_client import generate_latest

    from mlserve.monitoring.metrics import REGISTRY

    return Response(generate_latest(REGISTRY), content_type=PROMETHEUS_TEXT)


def _openapi(server: Serving) -> Response:
    from mlserve.server.openapi import document

    return Response(document(__version__))


def _docs(server: Serving) -> Response:
    from mlserve.server.openapi import docs_page, document

    return Response(docs_page(document(__version__)), content_type="text/html; charset=utf-8")


_GET_ROUTES = {"/metrics": _metrics, "/openapi.json": _openapi, "/docs": _docs}


def one_model(server: Serving, name: str, version: str | None) -> Any:
    """The model ``name`` of ``version``; without a version, the unversioned or highest one."""
    models = find_models(server, name, version)
    if version is None and len(models) > 1:
        unversioned = [m for m in models if not m.version]
        if unversioned:
            return unversioned[0]
        top = highest_version([m.version for m in models])
        return next(m for m in models if m.version == top)
    return models[0]


_TYPE_PREFIX = "TYPE_"


def _config_tensor(spec: dict[str, Any]) -> dict[str, Any]:
    datatype = str(spec.get("datatype") or "")
    data_type = (
        "TYPE_STRING" if datatype == "BYTES" else _TYPE_PREFIX + datatype if datatype else ""
    )
    return {
        "name": spec.get("name", ""),
        "data_type": data_type,
        "dims": list(spec.get("shape") or []),
    }


def model_config(model: Any) -> dict[str, Any]:
    """The model's configuration in Triton's JSON form."""
    return {
        "name": model.name,
        "version": model.version,
        "platform": getattr(model, "platform", "") or "mlserve",
        "backend": "python",
        "max_batch_size": _max_batch_size(model),
        "input": [_config_tensor(spec) for spec in getattr(model, "inputs", [])],
        "output": [_config_tensor(spec) for spec in getattr(model, "outputs", [])],
        "parameters": {
            key: {"string_value": str(value)}
            for key, value in getattr(model, "_kwargs", {}).items()
            if isinstance(value, str | int | float | bool)
        },
    }


def _max_batch_size(model: object) -> int:
    """The rows one batch holds (0: batching off), by the rule batching itself reads; a
    value that is not a number shows as 0 here (the model's first request reports it)."""
    try:
        return max(0, max_batch_size(model))
    except (TypeError, ValueError):
        return 0


async def _repository(server: Serving, event: Event, path: str) -> Response:
    repository = server.repository
    assert repository is not None  # install() gave the server one
    if path == "/v2/repository/index":
        entries = repository.index()
        body = _json_body(event)
        if isinstance(body, dict) and body.get("ready"):
            entries = [e for e in entries if e["state"] == "READY"]
        return Response(entries)
    match = _REPOSITORY.match(path)
    if match is None:
        raise ModelNotFound(f"illegal repository path {path}")
    name, action = match["model"], match["action"]
    if not server.model_control:
        raise Forbidden(f"model {action} is off: serve with --model-control-mode explicit")
    check_model_name(name)
    body = _json_body(event)
    carried = body if action == "weights" else _carried_weights(body)
    if carried is not None:
        return Response(await change_weights(server, name, weights_of_body(name, carried)))
    if action == "load":
        await repository.load(name, load_overrides(name, body))
    else:
        await repository.unload(name)
    return Response({"name": name, action: True})


def load_overrides(name: str, body: object) -> dict[str, Any] | None:
    """The parameters a load's ``{"parameters": {"config": "<JSON>"}}`` sets (None: no
    config); any other load parameter (Triton's ``file:`` overrides) is refused
    (docs/repository.md#loading-with-a-config-override)."""
    parameters = body.get("parameters") if isinstance(body, dict) else None
    if not parameters:
        return None
    if not isinstance(parameters, dict):
        raise InvalidInput(f"failed to load '{name}': 'parameters' is an object")
    for key in parameters:
        if key.startswith("file:"):  # Triton's words and status for a file it cannot write
            shown = key if len(key) <= 48 else key[:45] + "..."
            raise MLServeError(
                f"failed to poll from model repository: failed to load '{name}': file "
                f"override '{shown}' has no counterpart in mlserve (model files come from "
                "the repository)"
            )
        if key != "config":
            raise InvalidInput(
                f"failed to load '{name}': load parameter '{key}' has no counterpart in "
                "mlserve (a load takes 'config'; model files come from the repository)"
            )
    if "config" not in parameters:
        return None
    from mlserve.repository.overrides import parse_overrides  # the repository's, on a load only

    return parse_overrides(name, parameters["config"])


def _carried_weights(body: object) -> dict[str, Any] | None:
    """What holds the weights of a load that sets them: a ``weights`` parameter, or a
    ``config`` whose JSON has ``weights`` (so tritonclient's ``load_model`` changes
    them: docs/graphs.md#changing-weights-while-serving); None for a plain load."""
    parameters = body.get("parameters") if isinstance(body, dict) else None
    if not isinstance(parameters, dict):
        return None
    if "weights" in parameters:
        return parameters
    config = parameters.get("config")
    if isinstance(config, str) and '"weights"' in config:
        try:
            parsed = loads(config)
        except InvalidInput:
            return None
        if isinstance(parsed, dict) and "weights" in parsed:
            return parsed
    return None


def check_model_name(name: str) -> None:
    """A model name from a request names a folder of the repository, nothing outside it."""
    if not name or name in (".", "..") or any(c in name for c in "/\\\x00") or name[0] == "~":
        raise InvalidInput(f"illegal model name {name!r}: a name is one folder of the repository")


def _json_body(event: Event) -> Any:
    body = event.body
    if isinstance(body, bytes | bytearray | str) and body:
        return loads(body)
    return body
