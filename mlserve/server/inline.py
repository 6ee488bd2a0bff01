"""Whether a request can be answered in the caller's thread, with no event loop.

The mock server (``GraphServer.test``) and the sync ``run()`` answer in the
caller's thread when every step on a request's path is plain code: a hop to
the background loop and back costs far more than a trivial model. A graph
with any async part keeps the loop path:

* a router and its models run inline when the router dispatches through
  mlserve's own ``route_event`` and every model has a plain ``predict`` /
  ``explain`` / ``op_*``, mlserve's own ``do_event_async`` and no batching;
* a flow runs inline on the sync engine (``engine="sync"``) when each of its
  steps does. On the async engine (the default) it runs inline too when it is
  one path of such steps that ends at its responder, with no error handler:
  storey would run the same steps in the same order on the same event and
  answer when the last one ends, which is what the sync engine does. Any
  other async-engine flow keeps its loop: its answer leaves at the responder
  while later steps and branches go on concurrently, a flow with no responder
  answers before its steps end, and error handlers are storey outlets;
* queues, remote steps, storey steps, merges and async handlers need a loop.

Server-level handlers say which of their requests may suspend
(mlserve.core.handlers).
"""

from __future__ import annotations

import inspect
from typing import Any

from mlserve.batching import batching_runner
from mlserve.graph.flow import ErrorStep, FlowStep, RootFlowStep
from mlserve.graph.routers import BaseModelRouter
from mlserve.graph.steps import RouterStep, TaskStep
from mlserve.graph.tasks import SyncStepCall
from mlserve.model import V2ModelServer

__all__ = ["graph_runs_inline", "model_runs_inline"]


def graph_runs_inline(step: object) -> bool:
    """Whether every step of the graph below ``step`` is plain (sync) code."""
    if isinstance(step, RootFlowStep) and step.engine != "sync" and not _one_path(step):
        return False
    if isinstance(step, FlowStep):
        return all(graph_runs_inline(child) for child in step._local.values())
    if isinstance(step, RouterStep):
        return _router_runs_inline(step.object) and all(
            graph_runs_inline(route) for route in step.object.routes.values()
        )
    if isinstance(step, TaskStep):
        return _task_runs_inline(step)
    return False  # a queue, or a step kind this module does not know


def _one_path(flow: Any) -> bool:
    """An async-engine flow the sync engine answers alike: one path of steps that
    ends at its responder, with no error handler."""
    steps, nexts = flow._local, flow._next
    if len(flow._starts) != 1 or any(len(after) > 1 for after in nexts.values()):
        return False
    if flow.on_error or any(
        isinstance(step, ErrorStep) or getattr(step, "on_error", None) for step in steps.values()
    ):
        return False
    responder = flow._responder
    return responder is not None and not nexts[responder]


def _router_runs_inline(router: object) -> bool:
    """A router whose dispatch is mlserve's own (its sync drive never suspends);
    the user's router may change ``select``, ``preprocess``, ``postprocess``..."""
    if not isinstance(router, BaseModelRouter):
        return False
    cls = type(router)
    return all(
        getattr(cls, name).__module__.startswith("mlserve.")
        for name in ("do_event_async", "_handle", "route_event")
    )


def _task_runs_inline(step: Any) -> bool:
    obj, call = step.object, step._call
    if hasattr(obj, "_outlets"):
        return False  # a storey step: the async engine wires it into storey itself
    if isinstance(call, SyncStepCall):
        return True  # a sync handler, do() or do_event() without an async twin
    return (
        obj is not None
        and call == getattr(obj, "do_event_async", None)
        and (model_runs_inline(obj))
    )


def model_runs_inline(model: object) -> bool:
    """A ``V2ModelServer`` whose hooks are plain functions, with mlserve's own
    async dispatch (not a remote model), no batching and no streaming."""
    if not isinstance(model, V2ModelServer):
        return False
    if type(model).do_event_async is not V2ModelServer.do_event_async:
        return False
    if model.is_streaming():  # a stream is read on the loop, never in the caller's thread
        return False
    hooks = [model.predict, model.explain]
    hooks += [getattr(model, name) for name in dir(type(model)) if name.startswith("op_")]
    if any(inspect.iscoroutinefunction(hook) for hook in hooks):
        return False
    return batching_runner(model) is None
