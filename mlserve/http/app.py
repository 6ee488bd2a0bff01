"""The ASGI app: HTTP bytes to an Event, the server's Response back to bytes.

Nothing else happens here: routing and model logic live in the graph. The
face's checks (``mlserve.http.gate``) and the body limit of ``FaceSettings``
apply as in the lean face; the connection limits are uvicorn's (the runner
passes them on). A streamed answer goes out as server-sent events, one
``more_body`` message per chunk as it comes; the server's ``send`` holds it while
the client reads slowly, and a client that leaves closes the stream
(docs/protocol.md#streaming-over-http).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mlserve.core import request_log, tracing
from mlserve.core.events import Event, Response, Trigger
from mlserve.core.settings import FaceSettings
from mlserve.core.streams import ChunkStream
from mlserve.http import gate, spans
from mlserve.monitoring.responses import http_counts, method_label
from mlserve.protocol.errors import MLServeError, PayloadTooLarge
from mlserve.server.graph_server import GraphServer, encode_response

__all__ = ["create_app"]

logger = logging.getLogger("mlserve.http")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
_HTTP_TRIGGER = Trigger(kind="http", name="http")
# Request targets (method, raw path, path) that passed the gate's target and method
# checks, which depend on nothing else: clients ask the same few URLs again and again.
# Bounded: a client that invents URLs only empties it.
_Admitted = set[tuple[str, bytes, str]]
_MAX_TARGETS = 256


def create_app(server: GraphServer, settings: FaceSettings | None = None) -> ASGIApp:
    """An ASGI application serving ``server`` (already initialised)."""
    settings = settings or FaceSettings()
    admitted: _Admitted = set()
    counts = http_counts()  # answers by (status, method), for /metrics

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(server, receive, send)
            return
        if scope["type"] != "http":
            return
        if tracing.on:
            await _traced(respond, scope, receive, send)
            return
        await respond(scope, receive, send)

    async def respond(scope: Scope, receive: Receive, send: Send) -> Response:
        started = time.perf_counter() if request_log.access else 0.0
        response, event = await _answer(server, settings, admitted, scope, receive)
        key = (response.status_code, method_label(scope["method"]))
        counts[key] = counts.get(key, 0) + 1
        if isinstance(response.body, ChunkStream):
            if event is not None:  # (a Response of this request's own)
                rid = request_log.request_id(event)
                response.headers = {**response.headers, "x-request-id": rid}
            await _stream(server, response, scope["path"], receive, send)
            return response
        headers = [(b"content-type", response.content_type.encode())]
        if response.headers:
            headers += [(k.lower().encode(), str(v).encode()) for k, v in response.headers.items()]
        headers.append((b"content-length", b"%d" % len(response.body)))
        rid = request_log.request_id(event) if event is not None else ""
        if rid:
            headers.append((b"x-request-id", rid.encode()))
            if tracing.on:
                spans.name_request(rid)
        if response.status_code == 413:  # the body was left unread: the connection cannot go on
            headers.append((b"connection", b"close"))
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": response.body})
        if request_log.access and spans.http_route(scope["method"], scope["path"]) is not None:
            client = scope.get("client") or ("", 0)  # (probes are left out)
            path = scope["path"]
            request_log.log_access(
                scope["method"],
                path,
                response.status_code,
                started,
                len(response.body),
                str(client[0]),
                rid,
                request_log.model_of(path, event),
            )
        return response

    return app


async def _traced(
    respond: Callable[[Scope, Receive, Send], Awaitable[Response]],
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """The request answered inside its server span (docs/observability.md#tracing)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    client, server_address = scope.get("client"), scope.get("server")
    length = headers.get("content-length", "")
    await spans.traced(
        lambda: respond(scope, receive, send),
        scope["method"],
        scope["path"],
        headers,
        int(length) if length.isdigit() else 0,
        client[0] if client else None,
        server_address[0] if server_address else None,
    )


async def _stream(
    server: GraphServer, response: Response, path: str, receive: Receive, send: Send
) -> None:
    """Send a streamed answer, each chunk one event in a ``more_body`` message (the
    server frames them: chunked, or close-delimited for HTTP/1.0); a disconnect
    cancels the writing, which closes the stream."""
    stream: ChunkStream = response.body
    fields = gate.event_stream_headers(response)
    headers = [(name.encode(), value.encode()) for name, value in fields.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})

    def write(events: list[bytes]) -> Awaitable[None] | None:  # sent now: the stream may wait
        if not events:
            return None
        body = b"".join(events)
        return asyncio.ensure_future(
            send({"type": "http.response.body", "body": body, "more_body": True})
        )

    writing = asyncio.ensure_future(gate.write_events(server, stream, path, write))
    watching = asyncio.ensure_future(_disconnect(receive))
    gone = False
    try:
        await asyncio.wait((writing, watching), return_when=asyncio.FIRST_COMPLETED)
        gone = watching.done()
    finally:
        for task in (writing, watching):
            task.cancel()
        for task in (watching, writing):
            with contextlib.suppress(asyncio.CancelledError):
                await task  # the stream closed: the generator's ``finally`` ran
        await stream.aclose()
    if not gone:  # the end of the body, with the last events
        last = writing.result() if not writing.cancelled() else []
        body = b"".join(last)
        await send({"type": "http.response.body", "body": body, "more_body": False})


async def _disconnect(receive: Receive) -> None:
    """Return when the client is gone (the request's body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _head_refusal(settings: FaceSettings, scope: Scope, raw_path: bytes) -> Response | None:
    """414/431 for a head over the limits (uvicorn has parsed it already)."""
    target = len(raw_path) + len(scope.get("query_string", b""))
    if target > settings.max_url_bytes:
        return Response({"error": f"the URL exceeds {settings.max_url_bytes} bytes"}, 414)
    lines = scope["headers"]
    if len(lines) > settings.max_headers or gate.header_bytes(lines) > settings.max_header_bytes:
        return Response({"error": "request headers exceed the limits"}, 431)
    return None


async def _answer(
    server: GraphServer, settings: FaceSettings, admitted: _Admitted, scope: Scope, receive: Receive
) -> tuple[Response, Event | None]:
    """The encoded answer, and the event answered (None: refused before one was made)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    raw_path = scope.get("raw_path") or scope["path"].encode()
    refused = _head_refusal(settings, scope, raw_path)
    if refused is None:
        target = (scope["method"], raw_path, scope["path"])
        # a known target passed the target and method checks: only credentials and the
        # body's encoding are left to check, and only when there are any
        if target not in admitted or settings.auth_enabled or "content-encoding" in headers:
            refused = gate.admit(settings, *target, headers)
            if refused is None:
                if len(admitted) >= _MAX_TARGETS:
                    admitted.clear()
                admitted.add(target)
    if refused is not None:
        return encode_response(refused), None
    try:
        event = await _to_event(scope, receive, headers, settings.max_body_bytes)
        if "content-encoding" in headers and event.body:
            event.body = await gate.decode_body_async(
                event.body, headers["content-encoding"], settings.max_body_bytes
            )
    except MLServeError as exc:
        return encode_response(server.error_response(exc)), None
    if request_log.track:  # JSON logs or the access log: the lines name the request
        request_log.current.set((event, event.path))
    return await gate.answer(server, event, headers), event


async def _to_event(scope: Scope, receive: Receive, headers: dict[str, str], limit: int) -> Event:
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    message = await receive()
    body = message.get("body", b"")
    if len(body) > limit:
        raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
    if message.get("more_body", False):
        body = await _rest_of_body(receive, body, limit)
    return Event(
        body=body or None,
        content_type=headers.get("content-type", ""),
        headers=headers,
        method="GET" if scope["method"] == "HEAD" else scope["method"],  # uvicorn drops the body
        path=scope["path"],
        trigger=_HTTP_TRIGGER,
        query=scope.get("query_string", b"").decode("latin-1"),
    )


async def _rest_of_body(receive: Receive, first: bytes, limit: int) -> bytes:
    """A body sent in several messages (chunked): counted against ``limit`` as it comes."""
    chunks = [first]
    size = len(first)
    more = True
    while more:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _lifespan(server: GraphServer, receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            server.wait_for_completion()
            await send({"type": "lifespan.shutdown.complete"})
            return
