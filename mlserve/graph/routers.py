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

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import lru_cache
from typing import Any, Protocol

from mlserve.core import tracing
from mlserve.core.aio import drive
from mlserve.core.context import GraphContext
from mlserve.core.events import Event, Response
from mlserve.core.version import __version__
from mlserve.graph.rollout import Rollout, RolloutDecision, RolloutPolicy
from mlserve.graph.shadow import SHADOW_QUEUE, ShadowRunner
from mlserve.graph.traffic import (
    FORCE_HEADER,
    ROUTE_KEY_HEADER,
    TrafficSplit,
    Variants,
    header_value,
)
from mlserve.protocol.errors import InvalidInput, ModelNotFound, unknown_model
from mlserve.protocol.forms import is_json_type
from mlserve.protocol.paths import get_path, set_path
from mlserve.protocol.tensors import loads

__all__ = ["BaseModelRouter", "ModelRouter", "SERVER_NAME", "server_metadata"]

SERVER_NAME = "mlserve"

logger = logging.getLogger("mlserve.graph")

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
    """Routes ``/v2/models/<m>[/versions/<v>]/<op>`` (or a body's ``model``) to a model.

    A model name whose versions carry weights is split among them, sticky by a
    routing key, and a shadow route gets a copy of its requests
    (docs/graphs.md#rolling-out-a-new-model): ``route_key`` names a request field
    that holds the routing key (the ``x-mlserve-route-key`` header comes first),
    ``allow_forced_route`` lets the ``x-mlserve-route`` header pick the variant,
    ``shadow_tolerance`` is how far a shadow's numbers may be from the primary's and
    still agree, and ``shadow_queue`` how many copies wait for a shadow."""

    def __init__(
        self,
        *args: Any,
        route_key: str | None = None,
        allow_forced_route: bool = False,
        shadow_tolerance: float = 0.0,
        shadow_queue: int = SHADOW_QUEUE,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.route_key = route_key
        self.allow_forced_route = allow_forced_route
        self.shadow_tolerance = float(shadow_tolerance)
        self.shadow_queue = int(shadow_queue)
        self.traffic = TrafficSplit()
        self._shadow_runners: dict[str, ShadowRunner] = {}
        # canary route key -> its rollout policy's judge, and who hears its decisions
        # (docs/graphs.md#rolling-back-or-promoting-a-canary)
        self.rollouts: dict[str, Rollout] = {}
        self.rollout_hooks: list[Callable[[RolloutDecision], None]] = []

    def post_init(self, mode: str = "sync") -> None:
        super().post_init(mode)
        self.refresh_traffic()

    def declared_weights(self) -> dict[str, dict[str, float]]:
        """Weights the router itself declares, beside its routes' own (a repository's
        config gives them); none here."""
        return {}

    def refresh_traffic(self) -> None:
        """Read the weights and shadows the routes declare into the split (at start,
        and when routes change)."""
        weights: dict[str, dict[str, float]] = {}
        shadows: dict[str, list[str]] = {}
        for key, route in self.routes.items():
            name = key.partition(":")[0]
            shadow = getattr(route, "shadow", None)
            if shadow:
                primary = name if shadow is True else str(shadow)
                shadows.setdefault(primary, []).append(key)
                for model in route.iter_models():
                    model.shadow_of = primary
            elif getattr(route, "weight", None) is not None and ":" in key:
                weights.setdefault(name, {})[key] = float(route.weight)
        self.refresh_rollouts()
        for name, declared in self.declared_weights().items():
            weights.setdefault(name, {}).update(declared)
        self.traffic.declare(weights, {name: tuple(keys) for name, keys in shadows.items()})

    def set_weights(self, name: str, weights: dict[str, Any]) -> dict[str, float]:
        """Change the weights of some of ``name``'s variants at run time (the others keep
        theirs); a request in flight keeps the table it read. Returns the weights in force."""
        routes = self.routes
        versions = {key for key in routes if key.partition(":")[0] == name and ":" in key}
        if not versions:
            raise unknown_model(name, routes)
        for variant in weights:
            key = str(variant) if ":" in str(variant) else f"{name}:{variant}"
            if key not in versions:
                raise InvalidInput(
                    f"model '{name}' has no variant '{variant}', it has: {sorted(versions)}"
                )
        in_force = self.traffic.set_weights(name, weights)
        for key, weight in in_force.items():  # the description follows (export, build)
            route = routes.get(key)
            if route is not None and hasattr(route, "weight"):
                route.weight = weight
        return in_force

    async def route_event(self, event: Event, path: str, run: RouteRun) -> Event:
        resolved = self.select(event, path)
        if resolved is None:
            event.terminated = True
            event.body = self.list_models()
            return event
        key, route, op = resolved
        event.path = op
        traffic = self.traffic
        if tracing.on and tracing.recording():  # the route's span (docs/observability.md)
            return await self._traced_route(traffic, key, route, event, run)
        if not traffic.stats and not traffic.shadows:  # no split here: the plain road
            return await run(route, event)
        return await self._run_variant(traffic, key, route, event, run)

    async def _traced_route(
        self, traffic: TrafficSplit, key: str, route: Any, event: Event, run: RouteRun
    ) -> Event:
        """``route_event``'s road inside a ``route {model}`` span."""
        model, _, version = key.partition(":")
        attributes = {"mlserve.model": model}
        if version:
            attributes["mlserve.model.version"] = version
        with tracing.span(f"route {model}", attributes):
            if not traffic.stats and not traffic.shadows:
                return await run(route, event)
            return await self._run_variant(traffic, key, route, event, run)

    async def _run_variant(
        self, traffic: TrafficSplit, key: str, route: Any, event: Event, run: RouteRun
    ) -> Event:
        """Run a route of a split or shadowed name: count it, name the variant in the
        answer, and hand the shadows their copies."""
        shadows = traffic.shadows.get(key.partition(":")[0]) if traffic.shadows else None
        if shadows and key in shadows:  # a shadow called by its own name
            shadows = None
        body = event.body
        if shadows and isinstance(body, dict):
            body = dict(body)  # the request as the shadows get it
        stats = traffic.stats.get(key)
        started = time.perf_counter()
        try:
            event = await run(route, event)
        except Exception:
            if stats is not None:
                stats.observe(time.perf_counter() - started, True)
                if key in self.rollouts:
                    self.judge(key)
            raise
        if stats is not None:  # a variant: counted, and named in the answer
            stats.observe(time.perf_counter() - started, False)
            if key in self.rollouts:
                self.judge(key)
            answer = event.body
            if type(answer) is dict:
                parameters = answer.get("parameters")
                answer["parameters"] = (
                    {**parameters, "route": key} if parameters else {"route": key}
                )
        if shadows:
            self._shadow(event, body, event.body, shadows)
        return event

    def declared_policies(self) -> dict[str, RolloutPolicy]:
        """Rollout policies the router itself declares, beside its routes' own (a
        repository's config gives them); none here."""
        return {}

    def refresh_rollouts(self) -> None:
        """One judge per weighted route with a policy; a route's judge is kept while
        its policy stays (its last decision with it)."""
        policies = {
            key: RolloutPolicy.of(route.policy)
            for key, route in self.routes.items()
            if getattr(route, "policy", None) and getattr(route, "weight", None) is not None
        }
        policies.update(self.declared_policies())
        rollouts = {}
        for key, policy in policies.items():
            kept = self.rollouts.get(key)
            rollouts[key] = kept if kept and kept.policy == policy else Rollout(key, policy)
        self.rollouts = rollouts

    def judge(self, key: str) -> RolloutDecision | None:
        """Judge the canary ``key`` after one of its calls; a decision changes the
        weights here at once and goes to the hooks (the other workers, the webhook)."""
        rollout = self.rollouts.get(key)  # None: the routes changed meanwhile
        decision = rollout.judge(self.traffic) if rollout is not None else None
        if decision is None:
            return None
        try:
            self.set_weights(decision.model, decision.weights)
        except (InvalidInput, ModelNotFound) as exc:  # a variant unloaded meanwhile
            logger.warning("rollout %s of %s not applied: %s", decision.decision, key, exc)
            return None
        for hook in self.rollout_hooks:
            try:
                hook(decision)
            except Exception:  # a hook never fails the call that decided
                logger.exception("rollout hook %r failed", hook)
        return decision

    def _shadow(self, event: Event, body: Any, answer: Any, shadows: tuple[str, ...]) -> None:
        """Hand each shadow a copy once the primary's answer is on its way: on a loop, a
        task that starts in the loop's next turn (after the face has written the answer);
        in a caller's thread, the shadow's own thread."""
        routes = self.routes
        try:
            on_loop = asyncio.get_running_loop() is not None
        except RuntimeError:
            on_loop = False
        for key in shadows:
            if key not in routes:  # unloaded: no copies until it is loaded again
                continue
            runner = self._shadow_runners.get(key)
            if runner is None:
                runner = self._shadow_runners[key] = ShadowRunner(
                    key, self.route_of, self.shadow_queue, self.shadow_tolerance
                )
            if on_loop:
                runner.submit_on_loop(event, body, answer)
            else:
                runner.submit(event, body, answer)

    def route_of(self, key: str) -> Any:
        """The route served under ``key`` now (None when there is none)."""
        return self.routes.get(key)

    def shadow_runners(self) -> dict[str, ShadowRunner]:
        """The shadows that got copies, by route key."""
        return dict(self._shadow_runners)

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
        table = self.traffic.table
        if table:
            variants = table.get(key)
            if variants is not None:  # a split name: its variant for this request
                key = self.pick_variant(variants, event)
                if key not in routes:  # a variant unloaded: the name's other versions
                    key = variants.name
        route = routes.get(key)
        if route is None:  # an unversioned name of versioned routes, or none served
            key = self.resolve_key(key, routes)
            route = routes[key]
        return key, route, op

    def pick_variant(self, variants: Variants, event: Event) -> str:
        """The variant of ``event``: the one it forces (when allowed), else by its
        routing key (header, request field, a stream message's key), else at random."""
        headers = event.headers
        if self.allow_forced_route and headers:
            forced = header_value(headers, FORCE_HEADER)
            if forced:
                key = forced if ":" in forced else f"{variants.name}:{forced}"
                if key not in variants.keys:
                    raise InvalidInput(
                        f"{FORCE_HEADER}: model '{variants.name}' has no variant '{forced}'"
                    )
                return key
        routing_key = header_value(headers, ROUTE_KEY_HEADER) if headers else None
        if routing_key is None and self.route_key and isinstance(event.body, dict):
            try:
                value = get_path(event.body, self.route_key)
            except InvalidInput:
                value = None
            routing_key = None if value is None else str(value)
        if routing_key is None and event.key is not None:
            routing_key = str(event.key)
        return variants.pick(routing_key)

    def resolve_key(self, key: str, routes: dict[str, Any] | None = None) -> str:
        """The route key for ``key``: as is, or an unversioned name's highest version
        (a shadow version never stands for its name)."""
        routes = self.routes if routes is None else routes
        if key in routes:
            return key
        if ":" not in key:
            shadows = self.traffic.shadows.get(key, ())
            versions = [
                k.partition(":")[2]
                for k in routes
                if k.partition(":")[0] == key and ":" in k and k not in shadows
            ]
            if versions:
                return f"{key}:{highest_version(versions)}"
        raise unknown_model(key, routes)
