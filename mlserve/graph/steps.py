"""Graph steps: the description a user builds and exports, and the live objects
built from it at ``init_object``.

A step's description is its declared fields (``fields``), written by
``to_dict()`` and read by ``from_dict()``; ``init_object`` turns it into the
object that handles events (a model, a router, a handler).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar

from mlserve.core.aio import drive
from mlserve.core.context import GraphContext
from mlserve.core.events import Event
from mlserve.core.loads import run_load
from mlserve.graph.classes import class_reference, construct, resolve_class
from mlserve.graph.rollout import RolloutPolicy
from mlserve.graph.routers import ModelRouter
from mlserve.graph.tasks import step_calls
from mlserve.graph.traffic import parse_weights
from mlserve.model import V2ModelServer
from mlserve.protocol.errors import InvalidInput

__all__ = [
    "MAX_ALLOWED_STEPS",
    "MAX_ROUTES",
    "BaseStep",
    "ParentStep",
    "RouterStep",
    "StepKinds",
    "TaskStep",
    "TooManyRoutes",
    "class_reference",
    "construct",
    "resolve_class",
    "step_from_dict",
]

MAX_ROUTES = 4500
MAX_ALLOWED_STEPS = MAX_ROUTES  # mlrun's name (mlrun.serving.states.MAX_ALLOWED_STEPS)


class TooManyRoutes(InvalidInput, ValueError):
    """A router past MAX_ROUTES: a 400 over the API, a ValueError when building
    a graph (as mlrun's MLRunInvalidArgumentError is)."""


class StepKinds:
    """Registry of step classes by ``kind``; a duplicate kind is an error."""

    def __init__(self) -> None:
        self._kinds: dict[str, type[BaseStep]] = {}

    def register(self, cls: type[BaseStep]) -> type[BaseStep]:
        if cls.kind in self._kinds:
            raise ValueError(f"step kind '{cls.kind}' is registered twice")
        self._kinds[cls.kind] = cls
        return cls

    def get(self, kind: str) -> type[BaseStep]:
        try:
            return self._kinds[kind]
        except KeyError:
            raise ValueError(f"unknown step kind '{kind}', known: {sorted(self._kinds)}") from None


step_kinds = StepKinds()


def step_from_dict(struct: dict[str, Any], name: str | None = None) -> BaseStep:
    """Rebuild a step of any kind from its ``to_dict()`` form."""
    kind = struct.get("kind", "task")
    return step_kinds.get(kind).from_dict(struct, name=name)


class BaseStep:
    """A node of the serving graph."""

    kind: ClassVar[str] = "base"
    fields: ClassVar[tuple[str, ...]] = ("after", "function", "comment")
    responder: bool | None  # set by respond() (a task step takes it as an argument)

    def __init__(self, name: str | None = None, after: list[str] | None = None) -> None:
        self.name = name
        self.after: list[str] = list(after or [])
        self.function: str | None = None
        self.comment: str | None = None
        self.context: GraphContext | None = None
        self._parent: BaseStep | None = None

    # ---- description -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        struct: dict[str, Any] = {"kind": self.kind}
        for field in self.fields:
            value = self._field_value(field)
            if value not in (None, "", [], {}):
                struct[field] = value
        return struct

    def _field_value(self, field: str) -> Any:
        return getattr(self, field, None)

    def to_yaml(self) -> str:
        """The step's description as YAML (mlrun's ``to_yaml()`` of a graph)."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, struct: dict[str, Any], name: str | None = None) -> BaseStep:
        step = cls(name=name or struct.get("name"))
        for field in cls.fields:
            if field in struct:
                step._set_field(field, struct[field])
        return step

    def _set_field(self, field: str, value: object) -> None:
        setattr(self, field, value)

    # ---- runtime -------------------------------------------------------------

    def init_object(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        mode: str = "sync",
        **kwargs: object,
    ) -> None:
        """Build the live object of this step."""
        self.context = context

    async def run_async(self, event: Event) -> Event:
        raise NotImplementedError

    def run(self, event: Event) -> Event:
        """Handle an event synchronously."""
        return drive(self.run_async(event))

    # ---- building a flow (mlserve.graph.flow) ---------------------------------

    def to(
        self,
        class_name: object = None,
        name: str | None = None,
        handler: object = None,
        **kwargs: Any,
    ) -> BaseStep:
        """Add the next step after this one, in this step's flow; returns the new step."""
        return self._flow().add_step(class_name, name, handler, after=self.name, **kwargs)

    def _flow(self) -> Any:
        """The flow this step is wired in (a FlowStep: it is above this module)."""
        flow = self._parent
        if flow is None or not hasattr(flow, "add_step"):
            raise ValueError(
                f"step '{self.name}' is not in a flow: "
                "build flows with graph.to() or graph.add_step()"
            )
        return flow

    def after_step(self, *after: str | BaseStep, append: bool = True) -> BaseStep:
        """Run this step after the steps named (or given); ``append=False``
        replaces the steps it ran after. Returns this step."""
        if not append:
            self.after = []
        for step in after:
            name = step if isinstance(step, str) else step.name
            if name and name not in self.after:
                self.after.append(name)
        return self

    def respond(self) -> BaseStep:
        """Mark this step as the one whose result answers the request."""
        self.responder = True
        return self

    def error_handler(
        self,
        name: str | None = None,
        class_name: object = None,
        handler: object = None,
        before: str | None = None,
        **kwargs: object,
    ) -> BaseStep:
        """Run a step when this one fails; it receives ``event.error`` and
        ``event.origin_state``."""
        return self._flow().error_handler_for(self, name, class_name, handler, before, **kwargs)

    def iter_models(self) -> Iterator[Any]:
        """The model objects (``V2ModelServer``) in and below this step."""
        return iter(())

    @property
    def fullname(self) -> str:
        parent = self._parent
        if parent is not None and parent.name and parent._parent is not None:
            return f"{parent.fullname}.{self.name}"
        return self.name or ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


class ParentStep(BaseStep):
    """A step holding child steps by key (a flow's ``steps``, a router's ``routes``): its
    ``to_dict()`` nests theirs, and ``from_dict()`` rebuilds them and hands each to ``_put``,
    which checks and adopts it as adding one by hand does."""

    children_field: ClassVar[str]

    def _put(self, key: str, step: BaseStep) -> BaseStep:
        raise NotImplementedError

    def _field_value(self, field: str) -> Any:
        if field == self.children_field:
            return {key: child.to_dict() for key, child in getattr(self, field).items()}
        return super()._field_value(field)

    def _set_field(self, field: str, value: Any) -> None:
        if field == self.children_field:
            for key, struct in value.items():
                self._put(key, step_from_dict(struct, name=key))
        else:
            super()._set_field(field, value)


@step_kinds.register
class TaskStep(BaseStep):
    """A step that runs a class (``do_event`` / ``do``) or a handler."""

    kind = "task"
    fields = (
        "class_name",
        "class_args",
        "handler",
        "full_event",
        "input_path",
        "result_path",
        "responder",
        "on_error",
        "weight",
        "shadow",
        "policy",
        *BaseStep.fields,
    )

    def __init__(
        self,
        class_name: str | type | Any = None,
        class_args: dict[str, Any] | None = None,
        handler: str | Callable[..., Any] | None = None,
        name: str | None = None,
        after: list[str] | None = None,
        full_event: bool | None = None,
        function: str | None = None,
        input_path: str | None = None,
        result_path: str | None = None,
        responder: bool | None = None,
    ) -> None:
        super().__init__(name, after)
        self.class_args: dict[str, Any] = dict(class_args or {})
        self.class_name: Any = class_name
        self._instance: Any = None
        if class_name is not None and not isinstance(class_name, (str, type)):
            self._instance = class_name
            self.class_name = type(class_name)
            given = self.class_args  # e.g. add_model(key, path, class_name=instance)
            self.class_args = {**_instance_args(class_name), **given}
            for key, value in given.items():  # mlrun builds the object again with them
                if hasattr(class_name, key):
                    setattr(class_name, key, value)
            # as mlrun: the paths given with the step, else the object's own
            input_path = input_path or _object_path(class_name, "input_path")
            result_path = result_path or _object_path(class_name, "result_path")
        self.handler = handler
        self.full_event = full_event
        self.function = function
        self.input_path = input_path
        self.result_path = result_path
        self.responder = responder
        self.on_error: str | None = None
        # a route's share of its model name, and the name it shadows
        # (docs/graphs.md#rolling-out-a-new-model)
        self.weight: float | None = None
        self.shadow: str | bool | None = None
        # a canary's rollout policy (docs/graphs.md#rolling-back-or-promoting-a-canary)
        self.policy: dict[str, Any] | None = None
        self._object: Any = None
        self._call: Callable[[Event], Any] | None = None
        self._run_sync: Callable[[Event], Event] | None = None

    def _field_value(self, field: str) -> Any:
        value = getattr(self, field, None)
        if field == "class_name" and isinstance(value, type):
            return class_reference(value)
        if field == "handler" and callable(value):
            return getattr(value, "__name__", str(value))
        return value

    @property
    def object(self) -> Any:
        """The live object (after ``init_object``)."""
        return self._object

    def init_object(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        mode: str = "sync",
        **kwargs: Any,
    ) -> None:
        super().init_object(context, namespace, mode)
        if self._instance is not None:
            self._object = self._instance
            _adopt(self._object, context, self.name, self)
        elif self.class_name:
            cls = resolve_class(self.class_name, namespace)
            self._object = construct(
                cls,
                self.class_args,
                context=context,
                name=self.name,
                input_path=self.input_path,
                result_path=self.result_path,
                full_event=self.full_event,
            )
        if getattr(self._object, "graph_step", False) is None:  # Merge counts the steps it follows
            self._object.graph_step = self
        if isinstance(self._object, V2ModelServer) and mode == "sync":
            run_load(partial(self._object.post_init, mode))  # beside the other models' loads
        elif self._object is not None and hasattr(self._object, "post_init"):
            self._object.post_init(mode)
        self._run_sync, self._call = step_calls(self, self._object, namespace, context)
        self._bind()

    def _bind(self) -> None:
        """From now on ``run`` and ``run_async`` are the object's own calls: an event
        goes through no frame of the step's (unless a subclass has its own)."""
        cls = type(self)
        if cls.run is TaskStep.run and cls.run_async is TaskStep.run_async:
            self.run, self.run_async = self._run_sync, self._call  # type: ignore[method-assign,assignment]

    async def run_async(self, event: Event) -> Event:
        assert self._call is not None, f"step '{self.name}' is not initialised"
        return await self._call(event)

    def run(self, event: Event) -> Event:
        """Handle an event synchronously: models and routers through their sync ``do_event``."""
        assert self._run_sync is not None, f"step '{self.name}' is not initialised"
        return self._run_sync(event)

    def iter_models(self) -> Iterator[Any]:
        if self._object is not None and hasattr(self._object, "get_metadata"):
            yield self._object

    def reloaded(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        class_args: dict[str, Any] | None = None,
    ) -> TaskStep:
        """A copy of this step with its object built and loaded afresh, for a repository
        load: this step serves on until the copy replaces it, and keeps serving when the
        copy's load failed. An object the user gave (not a class) loads again in place.
        ``class_args`` (a load's config override) builds the copy with those instead; an
        object the user gave cannot be built so (ValueError)."""
        if class_args is not None and self._instance is not None:
            raise ValueError(f"model '{self.name}' was given as an object, not built from a class")
        fresh = copy.copy(self)
        if class_args is not None:
            fresh.class_args = dict(class_args)
        if self._instance is not None and hasattr(self._instance, "ready"):
            self._instance.ready = False
        fresh.init_object(context, namespace, "sync")
        return fresh


def check_variant(
    key: str, weight: float | None, shadow: str | bool | None, routes: dict[str, Any]
) -> None:
    """A weighted route is a version of its model name (``m:v``), added once; its
    weight a number of 0 or more (docs/graphs.md#rolling-out-a-new-model)."""
    if weight is None:
        return
    name, _, version = key.partition(":")
    if not version:
        raise ValueError(
            f"route '{key}' has a weight: weighted routes are versions of one model name, "
            f"add them as '{name}:<variant>' (e.g. '{name}:v1', '{name}:v2')"
        )
    if key in routes:
        raise ValueError(f"route '{key}' is added twice: give each variant its own version")
    if shadow:
        raise ValueError(f"route '{key}' is a shadow: it takes no weight")
    try:
        parse_weights(name, {key: weight})
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


def _of(key: str, name: str) -> bool:
    return key.partition(":")[0] == name


def _instance_args(obj: object) -> dict[str, Any]:
    """The class_args that rebuild an instance given as ``class_name``."""
    to_args = getattr(obj, "to_class_args", None)
    if to_args is not None:
        return dict(to_args())
    to_dict = getattr(obj, "to_dict", None)  # mlrun's steps describe themselves so
    return dict(to_dict().get("class_args") or {}) if to_dict is not None else {}


def _object_path(obj: object, key: str) -> str | None:
    """An object's ``input_path``/``result_path`` (public, or mlrun's private ``_`` form)."""
    return getattr(obj, key, None) or getattr(obj, f"_{key}", None)


def _adopt(obj: object, context: GraphContext, name: str | None, step: object = None) -> None:
    """Give an instance built by the user the graph's context, its route name
    and the step's paths (mlrun builds the object again with them)."""
    if hasattr(obj, "context"):
        obj.context = context
    if name and hasattr(obj, "name") and not getattr(obj, "name", None):
        obj.name = name
    for key in ("input_path", "result_path"):
        value = getattr(step, key, None)
        if value is None:
            continue
        if hasattr(obj, key):
            setattr(obj, key, value)
        elif hasattr(obj, f"_{key}"):
            setattr(obj, f"_{key}", value)


@step_kinds.register
class RouterStep(ParentStep, TaskStep):
    """A router of routes (models), ``ModelRouter`` by default."""

    kind = "router"
    fields = ("routes", *TaskStep.fields)
    children_field = "routes"

    def __init__(
        self,
        class_name: str | type | Any = None,
        class_args: dict[str, Any] | None = None,
        handler: str | None = None,
        routes: dict[str, TaskStep] | None = None,
        name: str | None = None,
        function: str | None = None,
        input_path: str | None = None,
        result_path: str | None = None,
        after: list[str] | None = None,
    ) -> None:
        super().__init__(
            class_name,
            class_args,
            handler,
            name,
            after,
            function=function,
            input_path=input_path,
            result_path=result_path,
        )
        self._routes: dict[str, TaskStep] = {}
        for key, route in (routes or {}).items():
            self.add_route(key, route)

    @property
    def routes(self) -> dict[str, TaskStep]:
        return self._routes

    @routes.setter
    def routes(self, routes: dict[str, TaskStep]) -> None:
        """mlrun's ``graph.routes = {...}``: replace every route, through add_route's checks."""
        self._routes = {}
        for key, route in routes.items():
            self.add_route(key, route)

    def _put(self, key: str, step: BaseStep) -> BaseStep:
        return self.add_route(key, step)  # type: ignore[arg-type]

    def add_route(
        self,
        key: str,
        route: TaskStep | None = None,
        class_name: str | type | Any = None,
        handler: str | None = None,
        function: str | None = None,
        weight: float | None = None,
        shadow: str | bool | None = None,
        policy: RolloutPolicy | dict[str, Any] | None = None,
        **class_args: object,
    ) -> TaskStep:
        """Add (or replace) the route ``key``: a step, or a class with its args.
        ``weight``: its share of the traffic of its model name, for a version ``m:v``;
        ``shadow``: the model name it gets copies of (True: its own name's)
        (docs/graphs.md#rolling-out-a-new-model); ``policy``: a weighted route's
        rollback / promotion policy (docs/graphs.md#rolling-back-or-promoting-a-canary)."""
        if key not in self._routes and len(self._routes) >= MAX_ROUTES:
            raise TooManyRoutes(f"a router holds at most {MAX_ROUTES} routes")
        check_variant(key, weight, shadow, self._routes)
        if policy is not None and weight is None:
            raise ValueError(f"route '{key}' has a rollout policy: give it a weight too")
        policy_struct = None if policy is None else RolloutPolicy.of(policy).to_dict()
        if route is None:
            route = TaskStep(class_name, class_args, handler=handler, function=function)
        if weight is not None:
            route.weight = float(weight)
        if shadow is not None:
            route.shadow = shadow
        if policy_struct is not None:
            route.policy = policy_struct
        route.name = key
        route._parent = self
        self._routes[key] = route
        return route

    def set_weights(self, name: str, weights: dict[str, Any]) -> dict[str, float]:
        """Set the weights of ``name``'s variants (``{"v1": 90, "v2": 10}``): before
        serving in the description, while serving in the live router too."""
        live = getattr(self._object, "set_weights", None)
        if live is not None:
            return dict(live(name, weights))
        parsed = parse_weights(name, weights)
        for key in parsed:
            if key not in self._routes:
                raise ValueError(f"model '{name}' has no variant '{key}' in router '{self.name}'")
        for key, weight in parsed.items():
            self._routes[key].weight = weight
        routes = self._routes.items()
        return {k: r.weight for k, r in routes if r.weight is not None and _of(k, name)}

    def clear_children(self, routes: list[str]) -> None:
        for key in routes:
            self._routes.pop(key, None)

    def __getitem__(self, key: str) -> TaskStep:
        return self._routes[key]

    def init_object(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        mode: str = "sync",
        **kwargs: object,
    ) -> None:
        self.context = context
        for route in self._routes.values():
            route.init_object(context, namespace, mode)
        if self._instance is not None:
            self._object = self._instance
            self._object.routes = self._routes
            _adopt(self._object, context, self.name, self)
        else:
            cls = resolve_class(self.class_name, namespace) if self.class_name else ModelRouter
            self._object = construct(
                cls,
                self.class_args,
                context=context,
                name=self.name,
                routes=self._routes,
                input_path=self.input_path,
                result_path=self.result_path,
            )
        self._object.post_init(mode)
        self._call = self._object.do_event_async
        self._run_sync = self._object.do_event
        self._bind()

    def iter_models(self) -> Iterator[Any]:
        live = getattr(self._object, "iter_models", None)
        if live is not None:  # the live router may hold routes of its own (a repository)
            yield from live()
            return
        for route in self._routes.values():
            yield from route.iter_models()
