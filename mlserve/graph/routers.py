"""Routers: which route (model) handles an event, by the URL grammar of
docs/serving.md#the-url-surface.

GET  /, /v2/health               router metadata
GET  /v2/health/live | ready     liveness, readiness of every model
GET  /v2                         server metadata
GET  /v2/models                  listing
...  /v2/models/<m>[/versions/<v>][/<op>]   the model, with path <op>
POST /  {"model": "m[:v]", ...}  stream form: routed by the body
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from functools import lru_cache
from typing import Any, Protocol

from mlserve.core.aio import drive
from mlserve.core.context import GraphContext
from mlserve.core.events import Event, Response
from mlserve.core.version import __version__
from mlserve.protocol.errors import InvalidInput, ModelNotFound, unknown_model
from mlserve.protocol.forms import is_json_type
from mlserve.protocol.paths import get_path, set_path
from mlserve.protocol.tensors import loads

__all__ = ["BaseModelRouter", "ModelRouter", "SERVER_NAME", "server_metadata"]

SERVER_NAME = "mlserve"

# Extensions of the V2 protocol this server implements (GET /v2 lists them).
EXTENSIONS = [
    "binary_tensor_data",
    "model_repository",
    "statistics",
    "model_configuration",
    "system_shared_memory",
]


def server_metadata() -> dict[str, Any]:
    return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}


def highest_version(versions: list[str]) -> str:
    """The highest version: numeric order when all are numbers, else string order."""
    if all(v.isdigit() for v in versions):
        return max(versions, key=int)
    return max(versions)


def sorted_versions(versions: list[str]) -> list[str]:
    if all(v.isdigit() for v in versions):
        return sorted(versions, key=int)
    return sorted(versions)


class Route(Protocol):
    """A router's route (a step): its sync and async API."""

    def run(self, event: Event) -> Event: ...

    async def run_async(self, event: Event) -> Event: ...


# How a route is run for the router: through its sync API, or its async one.
RouteRun = Callable[[Route, Event], Awaitable[Event]]


class BaseModelRouter:
    """The URL grammar (docs/serving.md#the-url-surface); subclasses choose the route
    (``select``)."""

    # A router of no models answers nothing: it refuses to start (a repository's
    # router, whose models come and go at run time, does not need any).
    requires_routes = True

    def __init__(
        self,
        context: GraphContext | None = None,
        name: str | None = None,
        routes: dict[str, Any] | None = None,
        protocol: str | None = None,
        url_prefix: str | None = None,
        health_prefix: str | None = None,
        input_path: str | None = None,
        result_path: str | None = None,
        **kwargs: object,
    ) -> None:
        self.context = context or GraphContext()
        self.name = name
        self.routes: dict[str, Any] = routes or {}
        self.protocol = protocol or "v2"
        self.url_prefix = (url_prefix or f"/{self.protocol}/models").rstrip("/")
        self.health_prefix = (health_prefix or f"/{self.protocol}/health").rstrip("/")
        self.inputs_key = "instances" if self.protocol == "v1" else "inputs"
        self._input_path = input_path
        self._result_path = result_path
        self._kwargs = kwargs

    def post_init(self, mode: str = "sync") -> None:
        """Tell each model the versions of its name that this router serves."""
        if self.requires_routes and not self.routes:
            raise ValueError(
                f"{type(self).__name__} '{self.name or 'router'}' has no models to route to: "
                "add them with fn.add_model(...) before serving"
            )
        versions: dict[str, list[str]] = {}
        for key in self.routes:
            name, _, version = key.partition(":")
            if version:
                versions.setdefault(name, []).append(version)
        for model in self.iter_models():
            if model.name in versions:
                model.versions = sorted_versions(versions[model.name])

    def iter_models(self) -> Iterator[Any]:
        for route in self.routes.values():
            yield from route.iter_models()

    # ---- metadata and health ---------------------------------------------------

    def get_metadata(self) -> dict[str, Any]:
        return {"name": type(self).__name__, "version": "v2", "extensions": list(EXTENSIONS)}

    def is_ready(self) -> bool:
        models = list(self.iter_models())
        return bool(models) and all(model.ready for model in models)

    def list_models(self) -> dict[str, Any]:
        return {"models": list(self.routes)}

    def _health(self, path: str) -> Any:
        sub = path[len(self.health_prefix) :].strip("/")
        if sub == "live":
            return {"live": True}
        if sub == "ready":
            if self.is_ready():  # a plain body: the mock server's test() returns it as is
                return {"ready": True}
            return Response({"ready": False}, status_code=503)
        if sub == "":
            return self.get_metadata()
        raise ModelNotFound(f"unknown health path {path}")

    def _answer_without_route(self, event: Event, path: str) -> Any:
        """The answer to paths no route handles, or None to route the event."""
        if event.method == "GET":
            if path in ("", "/"):
                return self.get_metadata()
            if path == self.health_prefix or path.startswith(self.health_prefix + "/"):
                return self._health(path)
            if path == f"/{self.protocol}":
                return server_metadata()
        if path in ("", "/") or path == self.url_prefix or path.startswith(self.url_prefix + "/"):
            return None
        raise ModelNotFound(f"illegal path {path}, must start with {self.url_prefix}")

    # ---- dispatch ----------------------------------------------------------------

    def parse_body(self, event: Event) -> Any:
        """A body not yet parsed: an image becomes ``inputs: [bytes]``, else JSON if it is."""
        body = event.body
        if isinstance(body, (bytes, bytearray, memoryview, str)):
            if (event.content_type or "").startswith("image/"):
                return {
                    self.inputs_key: [bytes(body) if not isinstance(body, str) else body.encode()]
                }
            # As in mlrun, JSON whatever the content type (curl -d sends a form type);
            # a body that is not JSON reaches the model raw, unless it claims to be JSON.
            try:
                return loads(body)
            except InvalidInput:
                if is_json_type(event.content_type) and event.content_type:
                    raise
                return body
        return body

    def preprocess(self, event: Event) -> Event:
        return event

    def postprocess(self, event: Event) -> Event:
        return event

    def do_event(self, event: Event, *args: object, **kwargs: object) -> Event:
        """Handle an event synchronously: routes run through their sync API."""
        return drive(self._handle(event, run_sync))

    async def do_event_async(self, event: Event) -> Event:
        return await self._handle(event, _run_async)

    async def _handle(self, event: Event, run: RouteRun) -> Event:
        event = self.preprocess(event)
        path = (event.path or "/").rstrip("/") or "/"
        if event.body is not None and event.method != "GET":
            event.body = self.parse_body(event)
        original = event.body
        if self._input_path:
            event.body = get_path(original, self._input_path)
        answer = self._answer_without_route(event, path)
        if answer is not None:
            event.terminated = True
            event.body = answer
        else:
            event = self.postprocess(await self.route_event(event, path, run))
        if self._result_path:  # a router in a flow: its answer goes into the flow's body
            event.body = set_path(original, self._result_path, event.body)
        return event

    async def route_event(self, event: Event, path: str, run: RouteRun) -> Event:
        raise NotImplementedError


async def run_sync(route: Route, event: Event) -> Event:
    return route.run(event)


async def _run_async(route: Route, event: Event) -> Event:
    return await route.run_async(event)


VERSIONED_PATH = re.compile(r"^(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?(?:/(?P<op>.*))?$")


@lru_cache(maxsize=4096)  # clients repeat their paths: parsed once each (short ones)
def _route_of(prefix: str, path: str) -> tuple[str, str] | None:
    """``(route key, operation)`` of ``<prefix>/<m>[/versions/<v>][/<op>]``; ``("", "")``
    when ``path`` names no model under ``prefix``; None when it is not a model path."""
    sub = path[len(prefix) :].strip("/") if path.startswith(prefix) else ""
    if not sub:
        return "", ""
    match = VERSIONED_PATH.match(sub)
    if match is None:
        return None
    model, version = match["model"], match["version"]
    return (f"{model}:{version}" if version else model), match["op"] or ""


class ModelRouter(BaseModelRouter):
    """Routes ``/v2/models/<m>[/versions/<v>]/<op>`` (or a body's ``model``) to a model."""

    async def route_event(self, event: Event, path: str, run: RouteRun) -> Event:
        resolved = self.select(event, path)
        if resolved is None:
            event.terminated = True
            event.body = self.list_models()
            return event
        key, route, op = resolved
        event.path = op
        return await run(route, event)

    def select(self, event: Event, path: str) -> tuple[str, Any, str] | None:
        """``(route key, route, operation path)``; None asks for the listing."""
        routes = self.routes  # read once: a runtime change swaps in a new table (the repository)
        prefix = self.url_prefix
        parse = _route_of if len(path) <= 256 else _route_of.__wrapped__  # no long path cached
        parsed = parse(prefix, path)
        if parsed is None:
            raise ModelNotFound(f"illegal path {path}")
        key, op = parsed
        if not key:  # no model in the path: the listing (GET), else the body's model
            if path.startswith(prefix) and event.method == "GET":
                return None
            if not routes:
                raise ModelNotFound("no models are served")
            body = event.body if isinstance(event.body, dict) else {}
            key = str(body.get("model") or next(iter(routes)))
        route = routes.get(key)
        if route is None:  # an unversioned name of versioned routes, or none served
            key = self.resolve_key(key, routes)
            route = routes[key]
        return key, route, op

    def resolve_key(self, key: str, routes: dict[str, Any] | None = None) -> str:
        """The route key for ``key``: as is, or an unversioned name's highest version."""
        routes = self.routes if routes is None else routes
        if key in routes:
            return key
        if ":" not in key:
            versions = [k.partition(":")[2] for k in routes if k.partition(":")[0] == key]
            if versions:
                return f"{key}:{highest_version(versions)}"
        raise unknown_model(key, routes)
