"""The web console at ``/console`` (docs/console.md): its static files and the JSON
it reads, answered before the graph like the other extensions.

    GET /console, /console/                  index.html          (no credentials needed)
    GET /console/static/<file>               a file of mlserve/console/ (no credentials)
    GET /                                    302 to /console for a browser (Accept: text/html)
    GET /console/api/overview                the server and its models
    GET /console/api/history                 requests, errors, latency: 15 minutes of points
    GET /console/api/sample/<m>[/versions/<v>]  a V2 infer body (and a :predict one) to try
    GET /console/api/graph                   the graph's nodes and edges, as fn.plot() draws
    GET /console/api/records?model=&n=&q=    a model's last model-log records

The data routes take the API's credentials (``mlserve.server.auth``); every answer
carries a Content-Security-Policy that lets the page run only its own files.
``serve --no-console`` (``FaceSettings.no_console``) turns it all off: 404, no redirect.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from mlserve.batching import DEFAULT_BATCH_TIME, max_batch_size
from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only, suspends_for
from mlserve.core.version import __version__
from mlserve.graph.routers import BaseModelRouter, ModelRouter
from mlserve.model import V2ModelServer
from mlserve.protocol.errors import InvalidInput, ModelNotFound
from mlserve.protocol.tensors import loads
from mlserve.server.console_history import EVERY, POINTS, History, run_history
from mlserve.server.extensions import one_model
from mlserve.server.repository import find_routers
from mlserve.server.serving import Serving
from mlserve.server.stats import find_models

if TYPE_CHECKING:
    from mlserve.graph.plot import GraphNode

__all__ = [
    "CONSOLE_HEADERS",
    "ConsoleState",
    "configure_console",
    "console_handler",
    "console_of",
    "install",
    "is_console_page",
    "start_history",
]

STATIC = Path(__file__).resolve().parents[1] / "console"
CONSOLE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}
_SAMPLE = re.compile(r"^/console/api/sample/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?$")
_SECRET = re.compile(r"secret|passw|token|credential|api_?key|access_?key|private", re.I)
MAX_RECORDS = 500


@dataclass
class ConsoleState:
    """What the console shows of the process it runs in, beyond the server itself:
    set by ``mlserve serve`` (``configure_console``)."""

    enabled: bool = True
    auth: bool = False  # the faces ask for credentials
    monitor: bool = False  # serve --monitor: the drift monitor runs in this process
    worker: tuple[int, int] | None = None  # (index, count) of serve --workers N
    history: History = field(default_factory=History)


def is_console_page(path: str) -> bool:
    """The page and its files: served without credentials (they hold no data)."""
    return path in ("/console", "/console/") or path.startswith("/console/static/")


def console_of(server: Serving) -> ConsoleState:
    """The server's console state (made on first use)."""
    state: ConsoleState | None = getattr(server, "console", None)
    if state is None:
        state = ConsoleState()
        server.console = state  # type: ignore[attr-defined]
    return state


def install(server: Serving) -> None:
    """Give ``server`` the console's routes."""
    console_of(server)
    if console_handler not in server.handlers:
        server.add_handler(console_handler)


def configure_console(
    server: Serving,
    enabled: bool,
    auth: bool,
    monitor: bool = False,
    worker: tuple[int, int] | None = None,
) -> None:
    """What ``mlserve serve`` knows: the console on or off, auth, the monitor, the worker."""
    state = console_of(server)
    state.enabled, state.auth, state.monitor, state.worker = enabled, auth, monitor, worker


def start_history(server: Serving) -> asyncio.Task[None] | None:
    """Start sampling the history on the running loop (None when the console is off);
    the caller cancels the task at shutdown."""
    state = console_of(server)
    if not state.enabled:
        return None
    return asyncio.get_running_loop().create_task(run_history(server, state.history))


def _mine(method: str, path: str) -> bool:
    return method == "GET" and (path == "/" or path.startswith("/console"))


@answers_only(_mine)
@suspends_for(lambda event: False)
async def console_handler(server: Serving, event: Event) -> Response | None:
    """A ``GraphServer`` handler: the console's routes; None for every other request."""
    state = console_of(server)
    path = event.path or ""
    if path == "/":
        if state.enabled and "text/html" in _header(event, "accept"):
            return Response(b"", 302, "text/plain", {"Location": "/console", **CONSOLE_HEADERS})
        return None
    if path != "/console" and not path.startswith("/console/"):
        return None  # /consoles and the like: not the console's
    if not state.enabled:
        return _not_found("the console is off (serve --no-console)")
    try:
        if path.startswith("/console/api/"):
            return Response(_data(server, state, event, path), headers=dict(CONSOLE_HEADERS))
        if path in ("/console", "/console/"):
            return _static("index.html")
        if path.startswith("/console/static/"):
            return _static(path[len("/console/static/") :])
    except Exception as exc:
        response = server.error_response(exc, path)
        response.headers.update(CONSOLE_HEADERS)
        return response
    return _not_found(f"no console page {path}")


def _not_found(message: str) -> Response:
    return Response({"error": message}, 404, headers=dict(CONSOLE_HEADERS))


def _header(event: Event, name: str) -> str:
    for key, value in (event.headers or {}).items():
        if key.lower() == name:
            return str(value)
    return ""


def _static(name: str) -> Response:
    """A file of the console's folder: a plain name of a file in it, nothing else."""
    if not name or name.startswith(".") or any(c in name for c in "/\\\x00"):
        return _not_found("no such console file")
    path = STATIC / name
    try:
        if name not in {entry.name for entry in STATIC.iterdir()} or not path.is_file():
            return _not_found("no such console file")
        data = path.read_bytes()
    except OSError:
        return _not_found("no such console file")
    content_type = _CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")
    headers = {**CONSOLE_HEADERS, "Cache-Control": "no-cache"}
    return Response(data, 200, content_type, headers)


def _data(server: Serving, state: ConsoleState, event: Event, path: str) -> dict[str, Any]:
    if path == "/console/api/overview":
        return overview(server, state)
    if path == "/console/api/history":
        return state.history.to_dict()
    if path == "/console/api/graph":
        return graph(server)
    if path == "/console/api/records":
        return records(server, state, event.query or "")
    match = _SAMPLE.match(path)
    if match is not None:
        return sample(server, match["model"], match["version"])
    raise ModelNotFound(f"no console data at {path}")


# ---- overview -------------------------------------------------------------------------


def overview(server: Serving, state: ConsoleState) -> dict[str, Any]:
    """``/console/api/overview``: the server and every model the repository index lists."""
    stream = getattr(server.context, "stream", None)
    worker = state.worker
    info = {
        "name": "mlserve",
        "version": __version__,
        "function": server.function_name,
        "project": server.project,
        "model_control": "explicit" if server.model_control else "none",
        "auth": state.auth,
        "hide_errors": server.hide_errors,
        "worker": {"index": worker[0], "count": worker[1]} if worker else None,
        "tracking": bool(getattr(stream, "enabled", False)),
        "monitor": state.monitor,
        "store": bool(server.track_models),
    }
    routes = _routes(server)
    served = {(m.name, m.version): m for m in find_models(server)}  # a repository's too
    root = _tfserving_router(server)
    entries = server.repository.index() if server.repository is not None else []
    models = []
    for entry in entries:
        name, version = str(entry["name"]), str(entry["version"])
        key = f"{name}:{version}" if version else name
        kind = _kind(routes.get(key))
        model = served.get((name, version)) if kind == "model" else None
        tfserving = root is not None and key in root.routes
        models.append(_model_entry(server, entry, kind, model, tfserving))
    return {
        "server": info,
        "models": models,
        "history": {"every": EVERY, "seconds": EVERY * POINTS},
    }


def _routes(server: Serving) -> dict[str, Any]:
    """Every route of every router in the graph, by its key ("name:version" or "name")."""
    return {
        key: route for router in find_routers(server.graph) for key, route in router.routes.items()
    }


def _tfserving_router(server: Serving) -> BaseModelRouter | None:
    """The router TF Serving's ``/v1`` routes reach (mlserve.server.tfserving), or None."""
    router = getattr(server.graph, "object", None)
    if not isinstance(router, BaseModelRouter) or router.url_prefix == "/v1/models":
        return None
    return router


def _model_entry(
    server: Serving, entry: dict[str, Any], kind: str, model: Any, root: bool
) -> dict[str, Any]:
    is_model = model is not None
    # the index's UNAVAILABLE "unloaded" (Triton's words) is no failure: shown as such
    unloaded = entry["state"] == "UNAVAILABLE" and entry.get("reason") == "unloaded"
    inputs = _tensors(getattr(model, "inputs", None)) if is_model else []
    outputs = _tensors(getattr(model, "outputs", None)) if is_model else []
    batched = is_model and _batch_size(model) > 0
    limits = server.limits
    return {
        "name": str(entry["name"]),
        "version": str(entry["version"]),
        "state": "UNLOADED" if unloaded else str(entry["state"]),
        "reason": "" if unloaded else str(entry.get("reason") or ""),
        "platform": str(getattr(model, "platform", "") or "") if is_model else "",
        "inputs": inputs,
        "outputs": outputs,
        "batching": _batching(model) if batched else None,
        "concurrency": (
            {"threads": limits.model_concurrency, "queue": limits.model_queue}
            if is_model and not batched
            else None
        ),
        "endpoint_uid": getattr(model, "model_endpoint_uid", None) or None,
        "tfserving": root,
        "image": root and _is_image(inputs),
        "kind": kind,
        "explains": is_model and _explains(model),
    }


def _explains(model: Any) -> bool:
    """Whether a model answers explain: it has an explainer (the framework servers, a
    user model's ``shap_explainer``) or its own ``explain`` (docs/explain.md)."""
    if getattr(model, "explainer", None) is not None:
        return True
    return getattr(type(model), "explain", None) is not V2ModelServer.explain


def _names(router: BaseModelRouter) -> set[str]:
    return {key.partition(":")[0] for key in router.routes}


def _kind(route: Any) -> str:
    if route is None or not isinstance(getattr(route, "routes", None), dict):
        return "model"
    obj = getattr(route, "object", None)
    flag = getattr(obj, "is_ensemble", None)  # as tracking tells an ensemble (docs/monitoring.md)
    if flag is not None:
        return "ensemble" if flag else "router"
    return "router" if type(obj) in (ModelRouter, BaseModelRouter) else "ensemble"


def _tensors(declared: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": str(spec.get("name", "")),
            "datatype": str(spec.get("datatype", "")),
            "shape": [int(size) for size in spec.get("shape") or []],
        }
        for spec in declared or []
        if isinstance(spec, dict)
    ]


def _batch_size(model: Any) -> int:
    try:
        return max_batch_size(model)
    except (TypeError, ValueError):
        return 0


def _batching(model: Any) -> dict[str, Any]:
    get = model.get_param
    return _json_safe(
        {
            "max_batch_size": _batch_size(model),
            "max_batch_time": get("max_batch_time", DEFAULT_BATCH_TIME),
            "num_batch_threads": get("num_batch_threads", 1),
            "max_queue_size": get("max_queue_size", None),
        }
    )


def _is_image(inputs: list[dict[str, Any]]) -> bool:
    """One input an uploaded image fills (mlserve.server.simple_tfs): [batch, H, W, C]
    with C of 1, 3 or 4, or 8-bit [batch, H, W]."""
    if len(inputs) != 1 or inputs[0]["datatype"] == "BYTES":
        return False
    shape = inputs[0]["shape"]
    if len(shape) == 4:
        return shape[1] > 0 and shape[2] > 0 and shape[3] in (1, 3, 4)
    return len(shape) == 3 and shape[1] > 0 and shape[2] > 0 and inputs[0]["datatype"] == "UINT8"


# ---- sample ---------------------------------------------------------------------------


def sample(server: Serving, name: str, version: str | None) -> dict[str, Any]:
    """``/console/api/sample/<m>[/versions/<v>]``: a request the model takes, from its
    declared inputs by gen_json's rules (a one-number input when it declares none)."""
    from mlserve.server.simple_tfs import example_infer_request, example_request  # email: lazy

    model = one_model(server, name, version)
    declared = _tensors(getattr(model, "inputs", None))
    router = getattr(server.graph, "object", None)
    prefix = router.url_prefix if isinstance(router, BaseModelRouter) else "/v2/models"
    versioned = f"/versions/{quote(version, safe='')}" if version else ""
    quoted = quote(name, safe="")  # the paths are URLs: a name's every character encoded
    if declared:
        body, instances = example_infer_request(declared), example_request(declared)
    else:  # nothing declared: one number, in both forms
        body = {"inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}
        instances = {"instances": [[1.0]]}
    root = _tfserving_router(server)
    key = f"{name}:{version}" if version else name
    tfserving = None
    if root is not None and (key in root.routes or (version is None and name in _names(root))):
        tfserving = {"path": f"/v1/models/{quoted}{versioned}:predict", "body": instances}
    return {"body": body, "path": f"{prefix}/{quoted}{versioned}/infer", "tfserving": tfserving}


# ---- graph ----------------------------------------------------------------------------


def graph(server: Serving) -> dict[str, Any]:
    """``/console/api/graph``: what ``fn.plot()`` draws (mlserve.graph.plot), as data."""
    from mlserve.graph.plot import walk_graph

    if server.graph is None:
        return {"topology": "flow", "nodes": [], "edges": []}
    walk = walk_graph(server.graph)
    return {
        "topology": walk.topology,
        "nodes": [_node(node) for node in walk.nodes],
        "edges": [{"from": e.tail, "to": e.head, "kind": e.kind} for e in walk.edges],
    }


def _node(node: GraphNode) -> dict[str, Any]:
    step = node.step
    return {
        "id": node.id,
        "label": node.label,
        "kind": node.kind,
        "class": _class_of(step),
        "params": _json_safe(_redacted(getattr(step, "class_args", None) or {})),
        "function": node.function,
        "responder": node.responder,
        "parent": node.parent,
    }


def _class_of(step: Any) -> str:
    if step is None:
        return ""
    for what in (getattr(step, "class_name", None), getattr(step, "handler", None)):
        if isinstance(what, str):
            if what:
                return what
        elif what is not None and hasattr(what, "__qualname__"):
            return f"{what.__module__}.{what.__qualname__}"
    obj = getattr(step, "object", None)
    return type(obj).__name__ if obj is not None else ""


def _redacted(args: dict[str, Any]) -> dict[str, Any]:
    """Class arguments with the value of any secret-looking key hidden."""
    return {
        str(key): "***"
        if _SECRET.search(str(key))
        else (_redacted(value) if isinstance(value, dict) else value)
        for key, value in args.items()
    }


def _json_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as plain JSON: other objects by their type's name, NaN and infinities
    as strings, nesting cut at 8 levels."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth >= 8:
        return "..."
    if isinstance(value, dict):
        return {str(key): _json_safe(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_safe(item, depth + 1) for item in value]
    return f"<{type(value).__name__}>"


# ---- records --------------------------------------------------------------------------


def records(server: Serving, state: ConsoleState, query: str) -> dict[str, Any]:
    """``/console/api/records``: the last ``n`` model-log records of ``model``, newest
    first, with ``q`` in their text when given."""
    params = parse_qs(query)
    model = (params.get("model") or [""])[0]
    if not model:
        raise InvalidInput("records: give the model (?model=<name>)")
    raw_n = (params.get("n") or ["50"])[0]
    if not raw_n.isdigit() or not 1 <= int(raw_n) <= MAX_RECORDS:
        raise InvalidInput(f"records: n is a number from 1 to {MAX_RECORDS}, not {raw_n!r}")
    count, text = int(raw_n), (params.get("q") or [""])[0]
    stream = getattr(server.context, "stream", None)
    pusher = getattr(stream, "pusher", None)
    if pusher is None:
        return {"records": [], "source": "none"}
    uri = str(getattr(stream, "stream_uri", "") or "")
    if state.worker is not None and _local_file(uri) is not None:  # every worker's records
        lines: list[Any] = _file_tail(_local_file(uri), model)  # type: ignore[arg-type]
        source = "file"
    else:
        lines, source = pusher.recent_records(model), "memory"
    found: list[Any] = []
    for line in reversed(lines):
        record = _decoded(line)
        if record is None or (text and text.lower() not in _text(line).lower()):
            continue
        found.append(record)
        if len(found) >= count:
            break
    return {"records": found, "source": source}


def _decoded(line: Any) -> Any:
    if isinstance(line, dict):
        return _json_safe(line)
    try:
        return loads(line)
    except ValueError:
        return None


def _text(line: Any) -> str:
    if isinstance(line, bytes | bytearray):
        return bytes(line).decode("utf-8", "replace")
    return json.dumps(_json_safe(line))


def _local_file(uri: str) -> Path | None:
    """The path of a stream written to a local file, else None."""
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    elif "://" in uri:
        return None
    path = Path(uri)
    return path if path.suffix in (".jsonl", ".json", ".log", ".txt") or path.is_file() else None


TAIL_BYTES = 1024 * 1024  # of a stream file, read for the last records


def _file_tail(path: Path, model: str) -> list[bytes]:
    """The last lines of a stream file that are ``model``'s records, oldest first."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first may be cut
    marker = b'"model":' + json.dumps(model, ensure_ascii=False).encode()  # as records are written
    wanted = [line for line in lines if marker in line]
    return wanted[-MAX_RECORDS:]
