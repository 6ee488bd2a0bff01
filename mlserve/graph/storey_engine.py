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
import contextvars
import functools
import itertools
import logging
from typing import Any

from mlserve.core import tracing
from mlserve.core.events import Event
from mlserve.core.limits import limits_of
from mlserve.core.streams import ChunkStream
from mlserve.graph.flow import ErrorStep, RootFlowStep, mark_error, register_engine, snapshot
from mlserve.graph.steps import BaseStep
from mlserve.graph.streaming import (
    answer_stream,
    chunk_event,
    error_text,
    gathered,
    is_collector,
    is_stream,
    on_streaming,
)

__all__ = ["StoreyEngine", "is_storey_step"]

logger = logging.getLogger("mlserve.graph")

STOP_TIMEOUT_SECONDS = 60.0
_MAX_CONTEXTS = 10_000  # traced requests in flight whose context the steps need


async def _step_span(key: str, step: BaseStep, event: Event) -> Event:
    with tracing.span(f"step {key}", {"mlserve.step": key}):
        return await step.run_async(event)


class StoreyEngine:
    """Runs one ``RootFlowStep`` on storey; started on the first event's loop."""

    def __init__(self, flow: RootFlowStep) -> None:
        self.flow = flow
        self._controller: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[int, asyncio.Future[Event]] = {}
        self._tokens = itertools.count()
        # streaming steps (docs/graphs.md#streaming-steps), by request token:
        self._relays: dict[int, _Relay] = {}  # a streamed answer's chunks, to its reader
        self._gathering: dict[tuple[str, int], list[Any]] = {}  # a collector's [ends, chunks...]
        self._streaming: set[int] = set()  # requests whose stream a step is pulling
        self._broken: set[int] = set()  # ... and that failed: the pull stops
        self._emitting: set[asyncio.Task[None]] = set()
        self._contexts: dict[int, contextvars.Context] = {}  # a traced request's, by token

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
            return await self._settle(key, step, item, event, has_next)

        head = storey.FlatMap(enter, full_event=True, name=f"{key}/in")
        tail = storey.FlatMap(leave, full_event=True, name=f"{key}/out")
        head.to(native).to(tail)
        return head, tail

    def _node(self, key: str, step: BaseStep) -> Any:
        handler = None if isinstance(step, ErrorStep) else self.flow.error_handler_of(key)
        has_next = bool(step.before if isinstance(step, ErrorStep) else self.flow._next[key])
        node: Any = None

        async def do(item: Any) -> list[Any]:
            if hasattr(item, "streaming_step") and is_collector(step):
                self._gathering.setdefault((key, item.id), [0]).append(item.body.body)
                return []
            return await self._do(key, step, item, has_next, handler, node)

        async def end(completion: Any) -> bool:
            return await self._end(key, step, completion, has_next, node)

        def select(event: Event) -> list[str]:
            if event.origin_state == key and event.error:
                return [handler or ""]
            return list(self.flow._next[key])

        node = _step_node()(
            do, end, full_event=True, name=key, fn_select_outlets=select if handler else None
        )
        return node

    async def _do(
        self, key: str, step: BaseStep, item: Any, has_next: bool, handler: str | None, node: Any
    ) -> list[Any]:
        event: Event = item.body
        streamer = getattr(item, "streaming_step", None)
        try:
            if tracing.on:
                event = await self._traced_step(key, step, item.id, event)
            else:
                event = await step.run_async(event)
            if streamer and event is not None and is_stream(event.body):
                await _aclose(event.body)
                raise on_streaming(key, streamer)
        except Exception as exc:
            if handler is not None and not streamer:
                mark_error(event, step, exc)
                item.body = event
                return [item]
            self._fail(item.id, key, exc)
            return []
        if event is None:  # the step holds the event (a Merge waiting for its other parts)
            return []
        if is_stream(event.body):  # pulled beside the flow: other requests go on meanwhile
            task = asyncio.get_running_loop().create_task(
                self._emit(key, step, item, event, has_next, node)
            )
            self._emitting.add(task)
            task.add_done_callback(self._emitting.discard)
            return []
        return await self._settle(key, step, item, event, has_next)

    async def _traced_step(self, key: str, step: BaseStep, token: int, event: Event) -> Event:
        """The step run in a ``step {key}`` span, a child of its request's span: storey runs
        it in a task of its own, so the request's context is carried by its token."""
        context = self._contexts.get(token)
        run = _step_span(key, step, event)
        if context is None:
            return await run
        return await asyncio.get_running_loop().create_task(run, context=context.copy())

    async def _emit(
        self, key: str, step: BaseStep, item: Any, event: Event, has_next: bool, node: Any
    ) -> None:
        """Pull a streaming step's chunks (a sync generator on a thread of its own)
        and send each on as an event of its own; then storey's end-of-stream mark."""
        import storey
        from storey.dtypes import StreamCompletion

        token, source = item.id, event.body
        if not isinstance(source, ChunkStream):
            source = ChunkStream(source, queue=limits_of(self.flow.context).stream_queue, name=key)
        self._streaming.add(token)
        error: Exception | None = None
        try:
            while not self._stopped(token):
                try:
                    chunk = await source.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:  # the generator's own: the stream ends with it
                    error = exc
                    break
                piece = storey.Event(body=chunk_event(event, chunk), id=token)
                piece.streaming_step = key
                try:
                    for out in await self._settle(key, step, piece, piece.body, has_next):
                        await node._do_downstream(out)
                except Exception as exc:  # a storey step of the user's failed on the chunk
                    self._fail(token, key, exc)
        finally:
            await source.aclose()
            self._streaming.discard(token)
            self._broken.discard(token)
        origin = storey.Event(body=chunk_event(event, None), id=token)
        completion = StreamCompletion(key, origin, error=error_text(error) if error else None)
        completion.exception = error
        try:
            if await self._end(key, step, completion, has_next, node):
                await node._do_downstream(completion)
        except Exception as exc:
            self._fail(token, key, exc)

    def _stopped(self, token: int) -> bool:
        """A stream's pull stops when a step failed on a chunk or its reader left."""
        relay = self._relays.get(token)
        return token in self._broken or (relay is not None and relay.closed)

    async def _end(
        self, key: str, step: BaseStep, completion: Any, has_next: bool, node: Any
    ) -> bool:
        """A stream ended at step ``key``: a collector sends the gathered chunks on, the
        responder ends its answer. Whether the end-of-stream mark goes on."""
        import storey

        token = completion.original_event.id
        if is_collector(step):
            seen = self._gathering.setdefault((key, token), [0])
            seen[0] += 1
            collector: Any = getattr(step, "object", None)
            if seen[0] < collector.expected_completions:
                return False
            del self._gathering[(key, token)]
            event = chunk_event(
                completion.original_event.body, gathered(seen[1:], completion.error)
            )
            item = storey.Event(body=event, id=token)
            for out in await self._settle(key, step, item, event, has_next):
                await node._do_downstream(out)
            return False
        if isinstance(step, ErrorStep):
            return False  # a stream's steps have no error handlers: it ends where it came from
        if key == self.flow._responder:
            await self._end_answer(token, key, completion)
        return True

    async def _settle(
        self, key: str, step: BaseStep, item: Any, event: Event, has_next: bool
    ) -> list[Any]:
        """After a step: answer the request when it is the responder (or ends
        the flow), and pass the event on to the next steps."""
        item.body = event
        is_error = isinstance(step, ErrorStep)
        goes_on = has_next and not event.terminated
        if hasattr(item, "streaming_step"):  # a chunk: the responder's goes to the stream
            if key == self.flow._responder:
                await self._answer_chunk(item.id, key, snapshot(event) if goes_on else event)
            return [item] if goes_on else []
        if event.terminated or key == self.flow._responder or (is_error and not has_next):
            self._answer(item.id, snapshot(event) if goes_on else event)
        elif not has_next and self.flow._responder is None:  # only an error handler responds
            self._answer(item.id, _accepted(event))
        return [item] if goes_on else []

    async def _answer_chunk(self, token: int, key: str, event: Event) -> None:
        """A chunk at the responder: the first one answers the request with the stream."""
        relay = self._relays.get(token)
        if relay is None:
            future = self._pending.pop(token, None)
            if future is None or future.done():
                return  # the request failed (or left) already
            relay = self._relays[token] = _Relay(limits_of(self.flow.context).stream_queue)
            future.set_result(
                chunk_event(event, answer_stream(self.flow.context, event, relay, key))
            )
        await relay.put(event.body)

    async def _end_answer(self, token: int, key: str, completion: Any) -> None:
        relay = self._relays.pop(token, None)
        error = getattr(completion, "exception", None)
        if relay is None:  # no chunk reached the responder
            future = self._pending.pop(token, None)
            if future is None or future.done():
                return
            if error is not None:
                future.set_exception(error)
                return
            relay = _Relay(1)
            event = chunk_event(completion.original_event.body, None)
            future.set_result(
                chunk_event(event, answer_stream(self.flow.context, event, relay, key))
            )
        await relay.end(error)

    def _answer(self, token: int, event: Event) -> None:
        self._contexts.pop(token, None)
        future = self._pending.pop(token, None)
        if future is not None and not future.done():
            future.set_result(event)

    def _fail(self, token: int, key: str, exc: Exception) -> None:
        self._contexts.pop(token, None)
        if token in self._streaming:
            self._broken.add(token)
        relay = self._relays.pop(token, None)
        if relay is not None:  # a streamed answer: the error is its last event
            relay.fail(exc)
            return
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
            if tracing.on:  # the steps' spans are children of the request's
                if len(self._contexts) >= _MAX_CONTEXTS:
                    self._contexts.clear()  # (streamed answers' left over: spans go on, unparented)
                self._contexts[token] = tracing.copy_context()
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


class _Relay:
    """A streamed answer's chunks, from the responder step to the reader: a bounded
    queue, so a slow reader holds the stream's pull back; a reader that leaves
    (``aclose``) stops it."""

    def __init__(self, size: int) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue(max(1, size))
        self._error: BaseException | None = None
        self.closed = False

    async def put(self, chunk: Any) -> None:
        if not self.closed:
            await self._queue.put(chunk)

    async def end(self, error: BaseException | None) -> None:
        if not self.closed:
            self._error = error
            await self._queue.put(_ENDED)

    def fail(self, error: BaseException) -> None:
        """End with ``error`` now (a step failed on a chunk), before chunks not yet read."""
        self._drain()
        self._error = error
        self._queue.put_nowait(_ENDED)

    def __aiter__(self) -> _Relay:
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise StopAsyncIteration
        chunk = await self._queue.get()
        if chunk is _ENDED:
            self.closed = True
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        self.closed = True
        self._drain()  # a put waiting for room returns

    def _drain(self) -> None:
        while not self._queue.empty():
            self._queue.get_nowait()


_ENDED = object()


async def _aclose(source: object) -> None:
    """Close a stream nobody will read (its generator's ``finally`` runs)."""
    closing = getattr(source, "aclose", None) or getattr(source, "close", None)
    if closing is not None:
        result = closing()
        if asyncio.iscoroutine(result):
            await result


@functools.cache
def _step_node() -> Any:
    """storey's FlatMap, seeing the end of a stream too (storey passes it on unseen)."""
    import storey
    from storey.dtypes import StreamCompletion

    class StepNode(storey.FlatMap):
        def __init__(self, fn: Any, on_end: Any, **kwargs: Any) -> None:
            super().__init__(fn, **kwargs)
            self._on_end = on_end

        async def _do(self, event: Any) -> Any:
            if isinstance(event, StreamCompletion):
                if await self._on_end(event):
                    return await self._do_downstream(event)
                return None
            return await super()._do(event)

    return StepNode


def _accepted(event: Event) -> Event:
    """The answer of a flow without a responder: the event's id, as mlrun's."""
    return Event(body={"id": event.id}, event_id=event.id, path=event.path)


register_engine("async", StoreyEngine)
