"""Run a serving function in nuclio's Python runtime (docs/deployment.md).

nuclio calls ``init_context(context)`` once per worker, then
``handler(context, event)`` for each event. The function to serve comes from
the environment variable ``SERVING_SPEC_ENV`` (the JSON of ``fn.to_dict()``),
else from a mounted file (``MLSERVE_SPEC_PATH``, default
``/etc/mlserve/function.yaml``). ``fn.export(path, format="nuclio")`` writes a
nuclio function config (``mlserve.function.nuclio_config``) that sets the first
and whose handler module calls this one's entry points.

A face and nothing more: a nuclio event becomes an mlserve ``Event``, the
server's answer becomes a ``nuclio_sdk.Response``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import nuclio_sdk

from mlserve.core import tracing
from mlserve.core.events import Event, Response, Trigger
from mlserve.core.streams import ChunkStream
from mlserve.function.function import ServingFunction, import_function
from mlserve.function.nuclio_config import HANDLER, SPEC_ENV, STREAMING_HANDLER, function_config
from mlserve.protocol.tensors import dumps
from mlserve.server.graph_server import GraphServer

__all__ = [
    "DEFAULT_SPEC_PATH",
    "HANDLER",
    "SPEC_ENV",
    "SPEC_PATH_ENV",
    "STREAM_TRIGGERS",
    "STREAMING_HANDLER",
    "answer_pieces",
    "function_config",
    "handler",
    "init_context",
    "load_function",
    "streaming_handler",
    "to_event",
]

SPEC_PATH_ENV = "MLSERVE_SPEC_PATH"
DEFAULT_SPEC_PATH = "/etc/mlserve/function.yaml"

# Message streams: their events carry no URL, so the body routes (path "/").
STREAM_TRIGGERS = frozenset(
    {
        "kafka",
        "kafka-cluster",
        "v3ioStream",
        "v3io-stream",
        "rabbit-mq",
        "rabbitMq",
        "kinesis",
        "nats",
        "mqtt",
        "eventhub",
        "pubsub",
    }
)

_TEXT_TYPES = ("application/json", "text/")


def load_function() -> ServingFunction:
    """The function to serve: ``SERVING_SPEC_ENV`` if set, else the mounted spec file."""
    spec = os.environ.get(SPEC_ENV)
    if spec:
        return ServingFunction.from_dict(json.loads(spec))
    path = os.environ.get(SPEC_PATH_ENV) or DEFAULT_SPEC_PATH
    if not os.path.exists(path):
        raise RuntimeError(f"no function to serve: set {SPEC_ENV}, or mount the spec at {path}")
    return import_function(path)


def init_context(context: nuclio_sdk.Context, namespace: dict[str, Any] | None = None) -> None:
    """Build the graph server once per nuclio worker; it lives on ``context.user_data``.

    ``namespace``: where class names resolve (the handler module's globals, when
    the function's code is that module), else the function's own source."""
    fn = load_function()
    namespace = namespace if namespace is not None else fn.namespace
    server = fn.to_graph_server()
    server.init_states(namespace=namespace)
    server.init_object(namespace)
    context.user_data.mlserve_server = server


def handler(context: nuclio_sdk.Context, event: nuclio_sdk.Event) -> nuclio_sdk.Response:
    """Answer one nuclio event through the graph server."""
    server: GraphServer = context.user_data.mlserve_server
    if tracing.on:  # a ``nuclio {trigger kind}`` server span (docs/observability.md#tracing)
        ours = to_event(event)
        with tracing.server_span(_span_name(ours), ours.headers, _attributes(ours)) as current:
            response = _to_nuclio(server.run(ours))
            tracing.set_status(current, response.status_code)
        return response
    return _to_nuclio(server.run(to_event(event)))


async def streaming_handler(
    context: nuclio_sdk.Context, event: nuclio_sdk.Event
) -> AsyncIterator[Any]:
    """``handler`` of a function with streaming on (``fn.set_streaming()``): nuclio
    sends what it yields as it comes (docs/migrating-from-mlrun.md#streaming)."""
    server: GraphServer = context.user_data.mlserve_server
    ours = to_event(event)
    if not tracing.on:
        async for piece in answer_pieces(server, await server.run_async(ours)):
            yield piece
        return
    with tracing.server_span(_span_name(ours), ours.headers, _attributes(ours)) as current:
        response = await server.run_async(ours)
        tracing.set_status(current, response.status_code)
        async for piece in answer_pieces(server, response):
            yield piece


def _span_name(event: Event) -> str:
    return f"nuclio {event.trigger.kind or 'http'}"


def _attributes(event: Event) -> dict[str, Any]:
    return {
        "http.request.method": event.method,
        "url.path": event.path,
        "mlserve.trigger.name": event.trigger.name,
    }


async def answer_pieces(server: GraphServer, response: Response) -> AsyncIterator[Any]:
    """An answer as a streaming handler yields it: each chunk of a streamed answer
    as a server-sent event (``data: <json>``; an error mid-stream as ``event:
    error``, then the end), any other answer as one nuclio response."""
    stream = response.body
    if not isinstance(stream, ChunkStream):
        yield _to_nuclio(response)
        return
    try:
        while True:
            try:
                chunk = await stream.__anext__()
            except StopAsyncIteration:
                return
            except Exception as exc:  # the step's error, or a stream limit
                yield b"event: error\ndata: %b\n\n" % dumps(server.error_response(exc).body)
                return
            yield b"data: %b\n\n" % dumps(chunk)
    finally:
        await stream.aclose()


def to_event(event: nuclio_sdk.Event) -> Event:
    """A nuclio event as mlserve's Event; a stream trigger's path is reset to ``/``."""
    trigger = getattr(event, "trigger", None)
    kind = str(getattr(trigger, "kind", "") or "")
    path = "/" if kind in STREAM_TRIGGERS else (event.path or "/")
    timestamp = getattr(event, "timestamp", None)
    return Event(
        body=event.body,
        content_type=event.content_type or "",
        headers=dict(event.headers or {}),
        method=event.method or None,
        path=path,
        event_id=str(event.id) if event.id not in (None, "") else None,
        trigger=Trigger(kind=kind, name=str(getattr(trigger, "name", "") or "")),
        time=timestamp if isinstance(timestamp, datetime) else None,
        offset=getattr(event, "offset", None),
    )


def _to_nuclio(response: Response) -> nuclio_sdk.Response:
    body = response.body
    if isinstance(body, (bytes, bytearray)) and response.content_type.startswith(_TEXT_TYPES):
        body = bytes(body).decode("utf-8", errors="replace")
    return nuclio_sdk.Response(
        headers=dict(response.headers),
        body=body,
        content_type=response.content_type,
        status_code=response.status_code,
    )
