"""The async engine: a flow's steps as a storey graph on the server's event loop.

Each step is a storey ``FlatMap`` that carries the mlserve ``Event`` as its
body. A step never lets an exception reach storey (that would end the whole
flow): a failure goes to the step's error handler (a storey outlet chosen by
``fn_select_outlets``) or fails that one request. The request waits on a
future of its own that the responder (or the error handler, or a failure)
resolves; a flow without a responder answers ``{"id": ...}`` once the event
is accepted, as mlrun does, unless an error handler ends the flow: as in mlrun,
such a handler responds, so the request waits for the handler's event (or,
when nothing fails, for ``{"id": ...}`` once the event reaches a last step).

storey is imported when the first flow starts, so importing the graph package
(which registers this engine as ``"async"``) stays cheap.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from mlserve.core.events import Event
from mlserve.graph.flow import ErrorStep, RootFlowStep, mark_error, register_engine, snapshot
from mlserve.graph.steps import BaseStep

__all__ = ["StoreyEngine", "is_storey_step"]

logger = logging.getLogger("mlserve.graph")

STOP_TIMEOUT_SECONDS = 60.0


class StoreyEngine:
    """Runs one ``RootFlowStep`` on storey; started on the first event's loop."""

    def __init__(self, flow: RootFlowStep) -> None:
        self.flow = flow
        self._controller: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[int, asyncio.Future[Event]] = {}
        self._tokens = itertools.count()

    def _start(self) -> None:
        import storey

        nodes = {key: self._nodes(key, step) for key, step in self.flow._local.items()}
        for key, (_, tail) in nodes.items():
            step = self.flow._local[key]
            targets = (
                list(step.before) if isinstance(step, ErrorStep) else list(self.flow._next[key])
            )
            handler = None if isinstance(step, ErrorStep) else self.flow.error_handler_of(key)
            for target in targets + ([handler] if handler else []):
                tail.to(nodes[target][0])
        source = storey.AsyncEmitSource(name="$source")
        for key in self.flow._starts:
            source.to(nodes[key][0])
        self._loop = asyncio.get_running_loop()
        self._controller = source.run()

    def _nodes(self, key: str, step: BaseStep) -> tuple[Any, Any]:
        """The storey nodes of a step: ``(where events enter, where they leave)``."""
        native = getattr(step, "object", None)
        if is_storey_step(native):
            return self._native(key, step, native)
        node = self._node(key, step)
        return node, node

    def _native(self, key: str, step: BaseStep, native: Any) -> tuple[Any, Any]:
        """A storey step of the user's (as mlrun runs them): it gets the body,
        and the mlserve event is held aside until the body comes out."""
        import storey

        has_next = bool(self.flow._next[key])
        held: dict[int, list[Event]] = {}

        async def enter(item: Any) -> list[Any]:
            held.setdefault(item.id, []).append(item.body)
            item.body = item.body.body
            return [item]

        async def leave(item: Any) -> list[Any]:
            waiting = held.get(item.id) or [Event(event_id=str(item.id))]
            event = waiting.pop(0)
            if not waiting:
                held.pop(item.id, None)
            event.body = item.body
            item.body = event
            return self._settle(key, step, item, event, has_next)

        head = storey.FlatMap(enter, full_event=True, name=f"{key}/in")
        tail = storey.FlatMap(leave, full_event=True, name=f"{key}/out")
        head.to(native).to(tail)
        return head, tail

    def _node(self, key: str, step: BaseStep) -> Any:
        import storey

        handler = None if isinstance(step, ErrorStep) else self.flow.error_handler_of(key)
        has_next = bool(step.before if isinstance(step, ErrorStep) else self.flow._next[key])

        async def do(item: object) -> list[Any]:
            return await self._do(key, step, item, has_next, handler)

        def select(event: Event) -> list[str]:
            if event.origin_state == key and event.error:
                return [handler or ""]
            return list(self.flow._next[key])

        return storey.FlatMap(
            do, full_event=True, name=key, fn_select_outlets=select if handler else None
        )

    async def _do(
        self, key: str, step: BaseStep, item: Any, has_next: bool, handler: str | None
    ) -> list[Any]:
        event: Event = item.body
        try:
            event = await step.run_async(event)
        except Exception as exc:
            if handler is not None:
                mark_error(event, step, exc)
                item.body = event
                return [item]
            self._fail(item.id, key, exc)
            return []
        if event is None:  # the step holds the event (a Merge waiting for its other parts)
            return []
        return self._settle(key, step, item, event, has_next)

    def _settle(
        self, key: str, step: BaseStep, item: Any, event: Event, has_next: bool
    ) -> list[Any]:
        """After a step: answer the request when it is the responder (or ends
        the flow), and pass the event on to the next steps."""
        item.body = event
        is_error = isinstance(step, ErrorStep)
        goes_on = has_next and not event.terminated
        if event.terminated or key == self.flow._responder or (is_error and not has_next):
            self._answer(item.id, snapshot(event) if goes_on else event)
        elif not has_next and self.flow._responder is None:  # only an error handler responds
            self._answer(item.id, _accepted(event))
        return [item] if goes_on else []

    def _answer(self, token: int, event: Event) -> None:
        future = self._pending.pop(token, None)
        if future is not None and not future.done():
            future.set_result(event)

    def _fail(self, token: int, key: str, exc: Exception) -> None:
        future = self._pending.pop(token, None)
        if future is not None and not future.done():
            future.set_exception(exc)
        else:
            logger.error("step %s failed: %s: %s", key, type(exc).__name__, exc)

    async def run_async(self, event: Event) -> Event:
        """Emit the event; await the responder's result (or ``{"id"}`` without one)."""
        if self._controller is None:
            self._start()
        elif asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("an async flow runs on the event loop it started on")
        token = next(self._tokens)
        future: asyncio.Future[Event] | None = None
        if self._waits():
            future = asyncio.get_running_loop().create_future()
            self._pending[token] = future
        import storey

        await self._controller.emit(storey.Event(body=event, id=token))
        if future is None:
            return _accepted(event)
        return await future

    def _waits(self) -> bool:
        """Whether a request waits for an answer: there is a responder, or an
        error handler that ends the flow (mlrun makes such a handler respond)."""
        if self.flow._responder is not None:
            return True
        return any(
            isinstance(step, ErrorStep) and not step.before for step in self.flow._local.values()
        )

    def stop(self) -> None:
        """Terminate the storey flow and wait for it to finish its events."""
        controller, self._controller = self._controller, None
        loop = self._loop
        if controller is None or loop is None or loop.is_closed():
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:  # called from the flow's own loop: it cannot block on itself
            loop.create_task(controller.terminate(wait=True))
            return
        done = asyncio.run_coroutine_threadsafe(controller.terminate(wait=True), loop)
        done.result(STOP_TIMEOUT_SECONDS)


def is_storey_step(obj: object) -> bool:
    """A storey flow step given as a step's class (mlrun runs those natively)."""
    return obj is not None and hasattr(obj, "_outlets") and hasattr(obj, "to")


def _accepted(event: Event) -> Event:
    """The answer of a flow without a responder: the event's id, as mlrun's."""
    return Event(body={"id": event.id}, event_id=event.id, path=event.path)


register_engine("async", StoreyEngine)
