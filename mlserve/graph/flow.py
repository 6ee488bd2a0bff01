"""Flows: steps wired into a DAG with ``.to()`` / ``after=`` (docs/graphs.md#a-flow-of-steps).

    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="prep", handler="prep").to("*", name="router").to(name="post", handler="(event)")
    graph["post"].respond()
    graph.error_handler(name="catch", handler="on_error", full_event=True)

The sync engine runs one path of steps in a worker thread; the async engine
(``engine="async"``, storey) runs branches too. A failing step goes to its
``error_handler`` (else the graph's), which gets the event with ``event.error``
(``{step name: error text}``) and ``event.origin_state`` (the step's name); what
it returns is the answer, unless it names a ``before`` step to go on with.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

from mlserve.core import tracing
from mlserve.core.aio import run_in_threadpool
from mlserve.core.context import GraphContext
from mlserve.core.events import Event
from mlserve.graph.classes import class_reference
from mlserve.graph.plot import plot_graph
from mlserve.graph.queues import QueueStep
from mlserve.graph.routers import BaseModelRouter
from mlserve.graph.steps import BaseStep, ParentStep, RouterStep, TaskStep, step_kinds
from mlserve.graph.streaming import (
    answer_stream,
    chunk_event,
    error_text,
    gathered,
    is_collector,
    is_stream,
    on_streaming,
    sync_chunks,
)

__all__ = [
    "ENGINES",
    "ErrorStep",
    "FlowStep",
    "RootFlowStep",
    "QUEUE_CLASSES",
    "add_error_handler",
    "make_step",
    "register_engine",
    "snapshot",
]

logger = logging.getLogger("mlserve.graph")

ENGINES = ("sync", "async")
PREVIOUS = "$prev"
QUEUE_CLASSES = (">>", "$queue")  # mlrun's two spellings of a queue step
SET_FLOW_EXISTS = (  # mlrun's words
    "set_flow() called on a step that already has downstream steps. "
    "If you want to overwrite existing steps, set force=True."
)

# Engines other than "sync", by name: a factory of an object with ``run_async``
# and ``stop``. The async (storey) engine registers itself from above this module.
_ENGINE_FACTORIES: dict[str, Callable[[RootFlowStep], Any]] = {}


def register_engine(name: str, factory: Callable[[RootFlowStep], Any]) -> None:
    """Make ``set_topology("flow", engine=name)`` run flows with ``factory(flow)``."""
    _ENGINE_FACTORIES[name] = factory


@step_kinds.register
class ErrorStep(TaskStep):
    """A step run when another fails; ``before`` names the step to go on with."""

    kind = "error"
    fields = ("before", "base_step", *TaskStep.fields)

    def __init__(
        self,
        *args: Any,
        before: list[str] | None = None,
        base_step: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.before: list[str] = list(before or [])
        self.base_step = base_step


def _default_name(class_name: object, handler: object) -> str:
    if isinstance(class_name, str) and class_name not in ("*", *QUEUE_CLASSES):
        return class_name.lstrip("*").rpartition(".")[2]
    if isinstance(class_name, type):
        return class_name.__name__
    if class_name is not None and not isinstance(class_name, str):
        return _instance_name(class_name)
    if callable(handler):
        return str(getattr(handler, "__name__", "handler"))
    if isinstance(handler, str) and not handler.strip().startswith("("):
        return handler.rpartition(".")[2]
    raise ValueError("the step needs a name= (it cannot be taken from its class or handler)")


def _instance_name(obj: object) -> str:
    """mlrun's name of a step given as an object: its own name (as its
    ``to_dict()`` says), else its dotted class name."""
    name = getattr(obj, "name", None)
    if not name and hasattr(obj, "to_dict"):
        name = obj.to_dict().get("name")
    return name or class_reference(type(obj))


def make_step(
    class_name: Any = None,
    name: str | None = None,
    handler: Any = None,
    graph_shape: str | None = None,
    function: str | None = None,
    full_event: bool | None = None,
    input_path: str | None = None,
    result_path: str | None = None,
    class_args: dict[str, Any] | None = None,
) -> BaseStep:
    """A step from ``to()`` / ``add_step()`` arguments: ``"*Cls"`` is a router,
    ``">>"`` / ``"$queue"`` a queue, a step object is itself, anything else a task."""
    args = dict(class_args or {})
    paths: dict[str, Any] = {"input_path": input_path, "result_path": result_path}
    if isinstance(class_name, BaseStep):
        step: BaseStep = class_name
    elif class_name in QUEUE_CLASSES or graph_shape == "queue":
        step = QueueStep(name=name, function=function, **args)
    elif graph_shape == "flow":
        step = FlowStep(name=name)
        step.function = function
    elif _is_router(class_name) or graph_shape == "router":
        router = class_name[1:] or None if isinstance(class_name, str) else class_name
        step = RouterStep(router, args, handler, name=name, function=function, **paths)
    else:
        step = TaskStep(
            class_name, args, handler, name=name, full_event=full_event, function=function, **paths
        )
    step.name = (
        name
        or step.name
        or (
            "router"
            if class_name == "*"
            else "queue"
            if class_name in QUEUE_CLASSES
            else _default_name(class_name, handler)
        )
    )
    return step


def _is_router(class_name: object) -> bool:
    if isinstance(class_name, str):
        return class_name.startswith("*")
    if isinstance(class_name, type):
        return issubclass(class_name, BaseModelRouter)
    return isinstance(class_name, BaseModelRouter)


def add_error_handler(
    step: BaseStep,
    name: str | None,
    class_name: object,
    handler: object,
    before: str | None,
    function: str | None = None,
    full_event: bool | None = None,
    input_path: str | None = None,
    result_path: str | None = None,
    **class_args: object,
) -> BaseStep:
    """``step.error_handler(...)`` / ``graph.error_handler(...)``; returns ``step``."""
    if not (class_name or handler):
        raise ValueError("error_handler() needs a class_name or a handler")
    flow = step if isinstance(step, FlowStep) else step._parent
    if not isinstance(flow, FlowStep):
        raise ValueError(f"step '{step.name}' is not in a flow")
    if step is flow and before:
        raise ValueError("the graph's error handler completes the flow: it takes no before=")
    name = name or _default_name(class_name, handler)
    error_step = ErrorStep(
        class_name,
        class_args,
        handler,
        name=name,
        full_event=full_event,
        function=function,
        input_path=input_path,
        result_path=result_path,
        before=[before] if before else None,
        base_step=step.name,
    )
    flow._put(name, error_step)
    step.on_error = name  # type: ignore[attr-defined]
    return step


def mark_error(event: Event, step: BaseStep, exc: BaseException) -> None:
    """Record on the event which step failed, and why (mlrun's ``event.error``)."""
    if not isinstance(event.error, dict):
        event.error = {}
    event.error[step.name or ""] = f"{type(exc).__name__}: {exc}"
    event.origin_state = step.name


def snapshot(event: Event) -> Event:
    """A copy of the event that the steps after a responder cannot change."""
    try:
        return copy.deepcopy(event)
    except TypeError:  # raw tensor buffers (memoryview) do not deep-copy
        clone = copy.copy(event)
        clone.body = copy.copy(event.body)
        return clone


@step_kinds.register
class FlowStep(ParentStep):
    """Steps wired into a graph; a nested flow runs its steps as one path."""

    kind = "flow"
    fields = ("steps", "engine", "on_error", *BaseStep.fields)
    children_field = "steps"

    def __init__(
        self,
        name: str | None = None,
        after: list[str] | None = None,
        steps: dict[str, BaseStep] | None = None,
        engine: str | None = None,
    ) -> None:
        super().__init__(name, after)
        self.engine = engine
        self.on_error: str | None = None
        self._steps: dict[str, BaseStep] = {}
        self._last_added: BaseStep | None = None
        for key, step in (steps or {}).items():
            self._put(key, step)
        self._local: dict[str, BaseStep] = {}
        self._next: dict[str, list[str]] = {}
        self._starts: list[str] = []
        self._responder: str | None = None

    # ---- description -------------------------------------------------------------

    @property
    def steps(self) -> dict[str, BaseStep]:
        return self._steps

    def __getitem__(self, name: str) -> BaseStep:
        return self._steps[name]

    def __contains__(self, name: str) -> bool:
        return name in self._steps

    def _put(self, key: str, step: BaseStep) -> BaseStep:
        step.name = key
        step._parent = self
        self._steps[key] = step
        return step

    # ---- building ------------------------------------------------------------------

    def to(
        self,
        class_name: object = None,
        name: str | None = None,
        handler: object = None,
        graph_shape: str | None = None,
        function: str | None = None,
        full_event: bool | None = None,
        input_path: str | None = None,
        result_path: str | None = None,
        **class_args: Any,
    ) -> BaseStep:
        """Add a step that starts the flow; chain more with the returned step's ``.to()``."""
        return self.add_step(
            class_name,
            name,
            handler,
            graph_shape=graph_shape,
            function=function,
            full_event=full_event,
            input_path=input_path,
            result_path=result_path,
            **class_args,
        )

    def add_step(
        self,
        class_name: object = None,
        name: str | None = None,
        handler: object = None,
        after: str | list[str] | None = None,
        before: str | None = None,
        graph_shape: str | None = None,
        function: str | None = None,
        full_event: bool | None = None,
        input_path: str | None = None,
        result_path: str | None = None,
        **class_args: object,
    ) -> BaseStep:
        """Add a step after ``after`` (names, or ``"$prev"`` for the last added step)
        and before ``before``; without either it starts the flow."""
        step = make_step(
            class_name,
            name,
            handler,
            graph_shape,
            function,
            full_event,
            input_path,
            result_path,
            class_args,
        )
        return self.insert_step(step.name or "", step, before=before, after=after)

    def insert_step(
        self,
        key: str,
        step: BaseStep,
        before: str | None = None,
        after: str | list[str] | None = None,
    ) -> BaseStep:
        """Put ``step`` (as ``key``) after ``after``, and make ``before`` follow it
        (by default ``step`` takes ``before``'s place after its predecessors)."""
        afters = self._resolve_after(after)
        if before is not None:
            target = self._step(before)
            if after is None:
                afters = list(target.after)
            target.after = [name for name in target.after if name not in afters] + [key]
        if after is not None or before is not None:
            step.after = afters
        self._put(key, step)
        self._last_added = step
        return step

    def _resolve_after(self, after: str | list[str] | None) -> list[str]:
        names = [after] if isinstance(after, str) else list(after or [])
        resolved = []
        for name in names:
            if name == PREVIOUS:
                if self._last_added is not None:
                    resolved.append(self._last_added.name or "")
                continue
            self._step(name)
            resolved.append(name)
        return resolved

    def _step(self, name: str) -> BaseStep:
        if name not in self._steps:
            raise ValueError(f"step '{name}' is not in the flow, steps: {list(self._steps)}")
        return self._steps[name]

    def list_child_functions(self) -> list[str]:
        """The child functions the steps name (``function=``), in order (mlrun's API)."""
        names: list[str] = []
        for step in self._steps.values():
            if step.function and step.function != "*" and step.function not in names:
                names.append(step.function)
        return names

    def find_router(self, name: str | None = None) -> RouterStep:
        """The flow's router: the one there is, or the one named (``router_step=``)."""
        if name is not None:
            step = self._step(name)
            if not isinstance(step, RouterStep):
                raise ValueError(f"step '{name}' is not a router")
            return step
        routers = [step for step in self._steps.values() if isinstance(step, RouterStep)]
        if not routers:
            raise ValueError("the flow has no router: add one with graph.to('*', name='router')")
        if len(routers) > 1:
            names = [router.name for router in routers]
            raise ValueError(f"the flow has several routers {names}: name one with router_step=")
        return routers[0]

    def error_handler(
        self,
        name: str | None = None,
        class_name: object = None,
        handler: object = None,
        before: str | None = None,
        **kwargs: Any,
    ) -> BaseStep:
        """The flow's own error handler (or a nested flow's, inside its parent)."""
        return add_error_handler(self, name, class_name, handler, before, **kwargs)

    def error_handler_for(
        self,
        step: BaseStep,
        name: str | None,
        class_name: object,
        handler: object,
        before: str | None,
        **kwargs: Any,
    ) -> BaseStep:
        """``step.error_handler(...)`` of one of this flow's steps."""
        return add_error_handler(step, name, class_name, handler, before, **kwargs)

    def set_flow(self, steps: list[Any], force: bool = False) -> BaseStep:
        """mlrun's ``graph.set_flow([...])``: the flow becomes ``steps`` (dicts of
        ``to()``'s arguments, step objects or class names) in a chain; ``force``
        replaces steps already there. Returns the last step."""
        if not steps:
            raise ValueError("set_flow() needs a list of steps")
        if self._steps and not force:
            raise ValueError(SET_FLOW_EXISTS)
        self._steps = {}
        self._last_added = None
        last: BaseStep = self
        for item in steps:
            args = dict(item) if isinstance(item, dict) else {"class_name": item}
            last = last.to(**args)
        return last

    def plot(
        self,
        filename: str | None = None,
        format: str | None = None,
        source: str | None = None,
        targets: list[str] | None = None,
        **kw: object,
    ) -> Any:
        """Draw the graph with graphviz (to ``filename`` when given); returns the Digraph."""
        return plot_graph(self, filename, format, source, targets, **kw)

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, Any]:
        """Show the graph as a picture in Jupyter."""
        return self.plot()._repr_mimebundle_(include, exclude)

    # ---- runtime ---------------------------------------------------------------------

    def _local_steps(self, context: GraphContext) -> dict[str, BaseStep]:
        """The steps this server runs (a nested flow runs all of its own)."""
        return dict(self._steps)

    def init_object(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        mode: str = "sync",
        **kwargs: object,
    ) -> None:
        self.context = context
        self._local = self._local_steps(context)
        if not self._local:
            raise ValueError(f"no steps of the flow run in function '{context.current_function}'")
        for step in self._local.values():
            step.init_object(context, namespace, mode)
        self._wire()
        if self.engine != "async":
            self._check_one_path()
            for key, step in self._local.items():
                native = getattr(step, "object", None)
                if hasattr(native, "_outlets") and not hasattr(native, "do"):
                    raise ValueError(
                        f"step '{key}' is a storey step: it runs on the async engine only"
                    )

    def _wire(self) -> None:
        """Index the local steps: next steps, start steps, the responder."""
        self._next = {key: [] for key in self._local}
        self._starts = []
        for key, step in self._local.items():
            if isinstance(step, ErrorStep):
                self._check_names(step.before, f"error handler '{key}' goes on before")
                continue
            self._check_names(step.after, f"step '{key}' comes after")
            ups = [name for name in step.after if name in self._local]
            for name in ups:
                self._next[name].append(key)
            if not ups:
                self._starts.append(key)
            handler = self.error_handler_of(key)
            if handler is not None and handler not in self._local:
                raise ValueError(
                    f"step '{key}' has error handler '{handler}', which is not in this function"
                )
        responders = [key for key, step in self._local.items() if getattr(step, "responder", False)]
        if len(responders) > 1:
            raise ValueError(f"only one step may respond(), got {responders}")
        self._responder = responders[0] if responders else None
        steps = [key for key, step in self._local.items() if not isinstance(step, ErrorStep)]
        _check_acyclic(self._starts, self._next, steps)

    def _check_names(self, names: list[str], what: str) -> None:
        for name in names:
            if name not in self._steps:
                raise ValueError(f"{what} '{name}', which is not in the flow")

    def _check_one_path(self) -> None:
        if len(self._starts) > 1 or any(len(nexts) > 1 for nexts in self._next.values()):
            raise ValueError(
                "the sync engine runs one path of steps; use engine='async' for branches"
            )

    def error_handler_of(self, key: str) -> str | None:
        """The handler of step ``key``'s failures: its own, else the graph's."""
        return getattr(self._steps[key], "on_error", None) or self.on_error

    def run(self, event: Event) -> Event:
        """Run the path of steps; the responder's result (else the last step's) is the answer."""
        return self._run_from(self._starts[0] if self._starts else None, event, None)

    def _run_from(self, key: str | None, event: Event, answer: Event | None) -> Event:
        """Run the path from step ``key`` on; ``answer``: the responder's, once it ran."""
        while key is not None:
            step = self._local[key]
            try:
                if tracing.on:  # a span per step (docs/observability.md#tracing)
                    with tracing.span(f"step {key}", {"mlserve.step": key}):
                        event = step.run(event)
                else:
                    event = step.run(event)
            except Exception as exc:
                if answer is not None and self.error_handler_of(key) is None:
                    logger.error(
                        "step %s failed after the answer: %s: %s", key, type(exc).__name__, exc
                    )
                    return answer  # as on the async engine: the responder's answer stands
                event, key = self._recover(step, event, exc)
                continue
            if event is None:
                raise ValueError(
                    f"step '{key}' held the event (a Merge waiting for more parts): "
                    "the sync engine runs one path, use engine='async'"
                )
            if event.terminated:
                return event
            if is_stream(event.body):
                return self._stream(key, event, answer)
            nexts = self._next[key]
            if key == self._responder and nexts:
                answer, event = event, snapshot(event)
            key = nexts[0] if nexts else None
        return answer if answer is not None else event

    # ---- streaming steps (docs/graphs.md#streaming-steps) ----------------------------

    def _stream(self, key: str, event: Event, answer: Event | None) -> Event:
        """Step ``key`` streams: the steps up to the next collector run once per chunk.
        When the answer is in that part it is the stream itself (a generator here, a
        ChunkStream once the root hands it to the loop); else the chunks are gathered
        and the flow goes on from the collector."""
        path, node = [], key
        while self._next[node]:
            node = self._next[node][0]
            path.append(node)
        cut = next((i for i, name in enumerate(path) if is_collector(self._local[name])), len(path))
        streamed, rest = [key, *path[:cut]], path[cut:]
        responder = self._responder
        if answer is None and (responder in streamed or (responder is None and not rest)):
            at = streamed.index(responder) + 1 if responder in streamed else len(streamed)
            source = event.body
            event.body = self._answer_chunks(event, source, streamed[:at], streamed[at:], rest)
            return event
        try:
            event.body = self._gather(event, streamed)
        except Exception as exc:
            if answer is None:
                raise
            logger.error("step failed after the answer: %s: %s", type(exc).__name__, exc)
            return answer
        if not rest:
            return answer if answer is not None else event
        return self._run_from(rest[0], event, answer)

    def _chunk_through(self, keys: list[str], event: Event, streamer: str) -> Event:
        """One chunk through the steps ``keys`` (a failure ends the stream)."""
        for key in keys:
            event = self._local[key].run(event)
            if event is None:
                raise ValueError(f"step '{key}' held a chunk: a stream's steps answer each chunk")
            if is_stream(event.body):
                _close(event.body)
                raise on_streaming(key, streamer)
        return event

    def _gather(self, event: Event, streamed: list[str]) -> Any:
        """The chunks of ``streamed[0]`` through the rest of ``streamed``, gathered."""
        chunks = sync_chunks(event.body)
        bodies: list[Any] = []
        try:
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    return gathered(bodies, None)
                except Exception as exc:  # the generator's own error is the collector's answer
                    return gathered(bodies, error_text(exc))
                piece = self._chunk_through(streamed[1:], chunk_event(event, chunk), streamed[0])
                bodies.append(piece.body)
        finally:
            _close(chunks)

    def _answer_chunks(
        self, event: Event, source: Any, answering: list[str], later: list[str], rest: list[str]
    ) -> Iterator[Any]:
        """The streamed answer: each chunk through the steps up to the responder; the
        steps after it get a copy, and the flow goes on after the collector once the
        stream ends (their failures are logged, as after any answer)."""
        chunks = sync_chunks(source)
        streamer, bodies, error = answering[0], [], None
        try:
            while True:
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                except Exception as exc:
                    error = exc
                    break
                piece = self._chunk_through(answering[1:], chunk_event(event, chunk), streamer)
                copied = snapshot(piece) if later or rest else piece
                yield piece.body
                if later or rest:
                    bodies.append(self._after_answer(later, copied, streamer))
        finally:
            _close(chunks)
        if rest:
            kept = [body for body in bodies if body is not _DROPPED]
            ended = chunk_event(event, gathered(kept, error_text(error) if error else None))
            self._run_from(rest[0], ended, event)
        if error is not None:
            raise error

    def _after_answer(self, keys: list[str], event: Event, streamer: str) -> Any:
        try:
            return self._chunk_through(keys, event, streamer).body
        except Exception as exc:
            logger.error("step failed after the answer: %s: %s", type(exc).__name__, exc)
            return _DROPPED

    def _recover(self, step: BaseStep, event: Event, exc: Exception) -> tuple[Event, str | None]:
        """Run the failed step's error handler: ``(its event, the step to go on with)``."""
        handler_name = self.error_handler_of(step.name or "")
        if handler_name is None:
            raise exc
        logger.warning(
            "step %s failed (%s: %s), handled by %s",
            step.name,
            type(exc).__name__,
            exc,
            handler_name,
        )
        mark_error(event, step, exc)
        handler = self._local[handler_name]
        event = handler.run(event)
        before = getattr(handler, "before", None)
        return event, (before[0] if before else None)

    async def run_async(self, event: Event) -> Event:
        return await run_in_threadpool(self.run, event)

    def iter_models(self) -> Iterator[Any]:
        for step in self._local.values():
            yield from step.iter_models()

    def wait_for_completion(self) -> None:
        """Close what the steps hold open (queue producers)."""
        for step in self._local.values():
            close = getattr(step, "close", None) or getattr(step, "wait_for_completion", None)
            if close is not None:
                close()


_DROPPED = object()  # a chunk a step after the answer failed on


def _close(source: object) -> None:
    """Close a generator early (its ``finally`` runs); a ChunkStream closes on its loop."""
    closing = getattr(source, "close", None)
    if closing is not None:
        closing()


def _check_acyclic(starts: list[str], nexts: dict[str, list[str]], steps: list[str]) -> None:
    """No path of steps comes back on itself (Kahn's walk reaches every step)."""
    indegree = dict.fromkeys(steps, 0)
    for key in steps:
        for target in nexts[key]:
            indegree[target] += 1
    ready, seen = list(starts), 0
    while ready:
        key = ready.pop()
        seen += 1
        for target in nexts[key]:
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    if seen < len(steps):
        cyclic = sorted(key for key, degree in indegree.items() if degree > 0)
        raise ValueError(f"the flow has a cycle through {cyclic}")


@step_kinds.register
class RootFlowStep(FlowStep):
    """The root of a flow topology: ``fn.set_topology("flow", engine=...)``."""

    kind = "root"

    def __init__(
        self,
        name: str | None = None,
        after: list[str] | None = None,
        steps: dict[str, BaseStep] | None = None,
        engine: str | None = "async",
    ) -> None:
        super().__init__(name, after, steps, engine or "async")
        self._engine: Any = None

    def _local_steps(self, context: GraphContext) -> dict[str, BaseStep]:
        """All steps for the root function (``"*"``), else those of the current child function."""
        current = context.current_function
        if current in (None, "", "*"):
            return dict(self._steps)
        return {key: step for key, step in self._steps.items() if step.function in (current, "*")}

    def init_object(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        mode: str = "sync",
        **kwargs: object,
    ) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"unknown engine '{self.engine}', use one of {ENGINES}")
        super().init_object(context, namespace, mode)
        if self.engine != "sync":
            factory = _ENGINE_FACTORIES.get(self.engine or "")
            if factory is None:
                raise ValueError(f"engine '{self.engine}' is not registered")
            self._engine = factory(self)

    async def run_async(self, event: Event) -> Event:
        if self._engine is not None:
            return await self._engine.run_async(event)
        event = await run_in_threadpool(self.run, event)
        if inspect.isgenerator(event.body):  # a streamed answer, pulled on a thread of its own
            stream = answer_stream(self.context, event, event.body, self.name or "flow")
            event.body = stream
            await stream.prefetch()  # a failure before the first chunk is an ordinary error
        return event

    def wait_for_completion(self) -> None:
        """Finish the async flow (terminate storey and await it), then close the steps."""
        if self._engine is not None:
            self._engine.stop()
        super().wait_for_completion()
