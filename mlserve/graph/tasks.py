"""How a task step calls its code: a model or class with ``do_event``, a
class's ``do``/handler method, a function, a dotted name, or an expression.

The sync and async callers of a step are chosen once, when the step is built,
so no call site asks again whether user code is a coroutine.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.events import Event
from mlserve.core.inline_rule import InlineRule
from mlserve.core.limits import limits_of
from mlserve.graph.classes import resolve_class
from mlserve.graph.streaming import streams_call
from mlserve.protocol.paths import get_path, set_path

__all__ = ["StepCalls", "SyncStepCall", "resolve_handler", "step_calls"]

SyncCall = Callable[[Event], Event]
AsyncCall = Callable[[Event], Awaitable[Event]]
StepCalls = tuple[SyncCall, AsyncCall]


def resolve_handler(
    handler: str | Callable[..., Any], namespace: dict[str, Any] | None
) -> Callable[..., Any]:
    """A callable from a handler: itself, an expression ``"(event + 1)"`` (with
    ``event`` bound to the body), a name in the namespace, or a dotted import."""
    if callable(handler):
        return handler
    text = handler.strip()
    if text.startswith("("):
        if not text.endswith(")"):
            raise ValueError(f"a handler expression must start with '(' and end with ')': {text}")
        return eval(f"lambda event: {text[1:-1]}", {}, {})  # noqa: S307 - the user's graph
    found = resolve_class(text, namespace)
    if not callable(found):
        raise ValueError(f"handler '{text}' is not callable")
    return found


def step_calls(step: Any, obj: Any, namespace: dict[str, Any] | None, context: Any) -> StepCalls:
    """``(sync call, async call)`` of a task step whose live object is ``obj``."""
    if obj is not None and hasattr(obj, "_outlets") and not (step.handler or hasattr(obj, "do")):
        return _storey_only(step, obj)  # a storey step with no do(): only storey runs it
    if obj is not None and not step.handler and hasattr(obj, "do_event"):
        async_call = (
            obj.do_event_async
            if hasattr(obj, "do_event_async")
            else SyncStepCall(obj.do_event, context, step.name)
        )
        return obj.do_event, async_call
    fn = _function_of(step, obj, namespace)
    if _takes_context(fn):
        fn = partial(fn, context=context)
    body_call = BodyCall(fn, bool(step.full_event), step.input_path, step.result_path)
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "func", None)):
        return body_call.run_blocking, body_call.run_async
    if streams_call(fn, obj):  # chunks come later: never inline (docs/graphs.md#streaming-steps)
        return body_call.run, partial(run_in_threadpool, body_call.run)
    return body_call.run, SyncStepCall(body_call.run, context, step.name)


class SyncStepCall:
    """A sync step's call from the event loop: in the worker pool, never on the
    loop, until its calls have shown that the hop costs more than they do.

    The rule is a light model's (``InlineRule``, bounded by ``--inline-predict-us``):
    its first calls are timed on threads; when their median CPU time is under the
    bound and none waited, later calls run on the loop, and one that turns slow sends
    the step back to threads, where it is measured again (a few times, then for good).
    """

    def __init__(self, fn: SyncCall, context: object, name: str | None) -> None:
        self.fn = fn
        self.context = context
        self.name = name or ""
        self.rule: InlineRule | None = None

    async def __call__(self, event: Event) -> Event:
        rule = self.rule
        if rule is None:
            inline_ns = int(limits_of(self.context).inline_predict_us * 1000)
            rule = self.rule = InlineRule(inline_ns, self.name, what="step")
        if rule.inline:
            return rule.run_inline(self.fn, event)
        return await run_in_threadpool(rule.threaded(partial(self.fn, event)))


def _storey_only(step: Any, obj: Any) -> StepCalls:
    message = (
        f"step '{step.name}' is a storey step ({type(obj).__name__}): "
        "it runs on the async engine only (engine='async')"
    )

    def refuse(event: Event) -> Event:
        raise ValueError(message)

    async def refuse_async(event: Event) -> Event:
        raise ValueError(message)

    return refuse, refuse_async


def _function_of(step: Any, obj: Any, namespace: dict[str, Any] | None) -> Callable[..., Any]:
    if obj is not None:
        fn = getattr(obj, step.handler or "do", None)
        if fn is None:
            raise ValueError(
                f"step '{step.name}': {type(obj).__name__} has no do_event(), do() or "
                f"'{step.handler}' method"
            )
        return fn
    if step.handler:
        return resolve_handler(step.handler, namespace)
    raise ValueError(f"step '{step.name}' needs a class_name or a handler")


def _takes_context(fn: Callable[..., Any]) -> bool:
    try:
        return "context" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class BodyCall:
    """Calls a function with the body (or ``input_path`` of it, or the whole
    event with ``full_event``) and writes its result back (``result_path``)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        full_event: bool,
        input_path: str | None,
        result_path: str | None,
    ) -> None:
        self.fn = fn
        self.full_event = full_event
        self.input_path = input_path
        self.result_path = result_path

    def _argument(self, event: Event) -> Any:
        return event if self.full_event else get_path(event.body, self.input_path)

    def _merge(self, event: Event, result: object) -> Event:
        if isinstance(result, Event):
            return result
        if self.full_event and result is None:  # the handler changed the event in place
            return event
        event.body = set_path(event.body, self.result_path, result)
        return event

    def run(self, event: Event) -> Event:
        return self._merge(event, self.fn(self._argument(event)))

    async def run_async(self, event: Event) -> Event:
        return self._merge(event, await self.fn(self._argument(event)))

    def run_blocking(self, event: Event) -> Event:
        """A coroutine handler called from the sync engine (a worker thread, no loop)."""
        return asyncio.run(self.run_async(event))
