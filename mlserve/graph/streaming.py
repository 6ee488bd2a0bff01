"""Streaming steps (docs/graphs.md#streaming-steps), shared by both flow engines.

A step whose handler returns a generator (or an async generator) streams: the
steps after it run once per chunk, and a ``Collector`` gathers the chunks into
one list. When the responding step is in the streamed part, the answer is a
``ChunkStream`` that the faces send chunk by chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from mlserve.core.events import Event
from mlserve.core.limits import limits_of, stream_limits
from mlserve.core.streams import ChunkStream

__all__ = [
    "Collector",
    "answer_stream",
    "chunk_event",
    "error_text",
    "gathered",
    "is_collector",
    "is_stream",
    "on_streaming",
    "streams_call",
    "sync_chunks",
]


class Collector:
    """Gathers a stream's chunks into one list (mlrun's ``storey.Collector``);
    an event that is not a chunk passes through.

    ``expected_completions``: how many streams end here before the list leaves
    (branches that each carry the stream); an error mid-stream leaves as
    ``{"error": "<Class>: <message>"}``, as a failed step's answer does."""

    def __init__(
        self, expected_completions: int = 1, name: str | None = None, context: object = None
    ) -> None:
        if expected_completions < 1:
            raise ValueError("expected_completions must be at least 1")
        self.expected_completions = expected_completions
        self.name = name
        self.context = context

    def do(self, body: Any) -> Any:
        return body


def is_collector(step: object) -> bool:
    """Whether a flow's step is a collector (by class, or ``"storey.Collector"``)."""
    return isinstance(getattr(step, "object", None), Collector)


def is_stream(value: object) -> bool:
    """Whether a step's result streams: a generator, an async generator, or a
    streaming model's answer."""
    return inspect.isgenerator(value) or inspect.isasyncgen(value) or isinstance(value, ChunkStream)


def streams_call(fn: Callable[..., Any], obj: object) -> bool:
    """Whether a step's call may return a stream: a generator function, or an
    object that says so (``is_streaming()``, as mlrun's ``Model``)."""
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        return True
    is_streaming = getattr(obj, "is_streaming", None)
    return callable(is_streaming) and is_streaming() is True


def on_streaming(step: str, streamer: str) -> Exception:
    """The error of a streaming step fed by another stream (storey's class and words)."""
    from storey.dtypes import StreamingError

    return StreamingError(
        "Streaming on top of streaming is not allowed. "
        f"Step '{step}' received a streaming event from '{streamer}'."
    )


def error_text(exc: BaseException) -> str:
    """``"<Class>: <message>"``, as a failed step is reported."""
    return f"{type(exc).__name__}: {exc}"


def gathered(chunks: list[Any], error: str | None) -> Any:
    """What a collector sends on: the chunks, or the error that ended the stream
    (``"<Class>: <message>"``)."""
    return {"error": error} if error else chunks


def chunk_event(event: Event, body: Any) -> Event:
    """The event of one chunk: the streaming step's event with the chunk as body."""
    clone = copy.copy(event)
    clone.body = body
    return clone


def answer_stream(context: object, event: Event, source: Any, name: str) -> ChunkStream:
    """The streamed answer of a flow, under the server's stream limits."""
    if isinstance(source, ChunkStream):
        return source
    limits = limits_of(context)
    between, whole = stream_limits(limits, event)
    return ChunkStream(
        source, queue=limits.stream_queue, chunk_timeout=between, timeout=whole, name=name
    )


def sync_chunks(source: Any) -> Iterator[Any]:
    """A stream's chunks for a thread with no event loop (the sync engine)."""
    if inspect.isgenerator(source):
        return source
    if inspect.isasyncgen(source):
        return _driven(source)
    raise ValueError(
        "a streaming model's answer streams in a flow on the async engine (engine='async')"
    )


def _driven(source: AsyncIterator[Any]) -> Iterator[Any]:
    """An async generator pulled on a loop of this thread's own."""
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(source.__anext__())
            except StopAsyncIteration:
                return
    finally:
        closing = getattr(source, "aclose", None)
        if closing is not None:
            with contextlib.suppress(Exception):
                loop.run_until_complete(closing())
        loop.close()
