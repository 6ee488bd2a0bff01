"""mlserve's own HTTP/1.1 face: an asyncio Protocol on httptools' parser that
turns each request straight into an Event and writes the Response in one call.

Under uvicorn, its ASGI layer (scope and message dicts, a receive/send pair,
chunked framing, flow-control objects) cost more CPU per request than all of
mlserve's own work. This face keeps the HTTP/1.1 semantics a model server
needs (keep-alive, pipelined requests answered in order, Content-Length and
chunked request bodies, ``Expect: 100-continue``, HEAD, 400 on a malformed
request, ``Connection: close``, an idle timeout) and drops the rest. The limits
of ``FaceSettings`` (body, header and URL sizes, header read timeout, maximum
connections) are enforced while parsing, so an oversized request is answered
before the rest of it is read. A connection holds bounded memory: it reads no
more while its client leaves answers unread past ``write_buffer_bytes`` (or its
pipelined requests hold as much), and is cut when they stay unread
(docs/security.md#memory-per-connection). A streamed answer goes out as
server-sent events, one chunk each as the model yields it; a client that reads
slowly holds the model back, one that leaves closes its stream
(docs/protocol.md#streaming-over-http). The ASGI
app (``mlserve.http.create_app``) stays for uvicorn, hypercorn and ASGI middleware.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import sys
import time
from collections import deque
from collections.abc import Awaitable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import httptools

from mlserve.core import request_log, tracing
from mlserve.core.events import Event, Response, Trigger
from mlserve.core.settings import FaceSettings
from mlserve.core.streams import ChunkStream
from mlserve.http import gate, spans
from mlserve.http.clients import TOO_MANY_CONNECTIONS, Clients, RateBucket, rate_limited
from mlserve.monitoring.responses import HTTP_METHODS, http_counts, method_label
from mlserve.protocol.errors import MLServeError
from mlserve.server.auth import authorize
from mlserve.server.graph_server import GraphServer, encode_response

__all__ = ["HTTPServer", "KEEP_ALIVE_SECONDS"]

logger = logging.getLogger("mlserve.http")

KEEP_ALIVE_SECONDS = FaceSettings.keep_alive_timeout  # the default idle keep-alive timeout
_MAX_PIPELINED = 64  # parsed requests waiting their turn before reading pauses
_HTTP_TRIGGER = Trigger(kind="http", name="http")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_BAD_REQUEST = (
    b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 30\r\nconnection: close\r\n\r\nInvalid HTTP request received."
)
_SERVER_ERROR = Response(b"Internal Server Error", 500, "text/plain; charset=utf-8")
_NO_BODY_STATUS = frozenset({204, 304})
_TOO_MANY_CONNECTIONS = Response({"error": "too many connections"}, 503)
_HEAD_TIMEOUT = Response({"error": "the request head took too long"}, 408)
_BODY_TIMEOUT = Response({"error": "the request body took too long"}, 408)


class _Refused(Exception):
    """Raised from a parser callback: the request was refused (a limit), stop parsing."""


# (status, content type) -> the response head up to the content length's digits.
_heads: dict[tuple[int, str], bytes] = {}


def _head(status: int, content_type: str) -> bytes:
    head = _heads.get((status, content_type))
    if head is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        head = f"HTTP/1.1 {status} {phrase}\r\ncontent-type: {content_type}\r\n".encode("latin-1")
        if status not in _NO_BODY_STATUS:
            head += b"content-length: "
        _heads[(status, content_type)] = head
    return head


def response_bytes(
    response: Response, keep_alive: bool, head_only: bool, request_id: str = ""
) -> bytes:
    """An encoded Response (bytes body) as it goes on the wire, naming ``request_id``
    in ``x-request-id`` when given."""
    body = response.body
    status = response.status_code
    if keep_alive and not head_only and not response.headers and status not in _NO_BODY_STATUS:
        # the common answer: its cached head, the length and the body in one formatting
        content_type = response.content_type
        head = _heads.get((status, content_type)) or _head(status, content_type)
        if request_id:
            return b"%s%d\r\nx-request-id: %s\r\n\r\n%s" % (
                head,
                len(body),
                request_id.encode(),
                body,
            )
        return b"%s%d\r\n\r\n%s" % (head, len(body), body)
    parts = [_head(status, response.content_type)]
    if status not in _NO_BODY_STATUS:
        parts.append(b"%d\r\n" % len(body))
    if request_id:
        parts.append(b"x-request-id: %s\r\n" % request_id.encode())
    for name, value in response.headers.items():
        parts.append(f"{name.lower()}: {value}\r\n".encode("latin-1"))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    if not head_only and status not in _NO_BODY_STATUS:
        parts.append(body)
    return b"".join(parts)


def closing_bytes(response: Response) -> bytes:
    """A refusal as it goes on the wire, closing the connection."""
    return response_bytes(encode_response(response), keep_alive=False, head_only=False)


def request_path(url: bytes) -> str:
    """The decoded path of a request target, without its query."""
    if not url.startswith(b"/"):
        url = httptools.parse_url(url).path or b"/"
    path = url.partition(b"?")[0].decode("latin-1")
    return unquote(path) if "%" in path else path


class _Head:
    """A request's header lines, decoded once. A keep-alive client sends the same
    lines request after request (the same body size), so each connection keeps the
    last head it decoded and reuses it while the lines repeat."""

    __slots__ = (
        "raw",
        "headers",
        "content_type",
        "has_body",
        "streamed",
        "gated",
        "authorization",
        "expects_continue",
    )

    def __init__(
        self,
        raw: list[tuple[bytes, bytes]] | None,
        headers: dict[str, str],
        has_body: bool,
        streamed: bool,
        gated: bool,
        authorization: str,
        expects_continue: bool,
    ) -> None:
        self.raw = raw
        self.headers = headers  # copied for each Event: a step may change its own
        self.content_type = headers.get("content-type", "")
        self.has_body = has_body
        self.streamed = streamed  # no declared length: the body is counted as it comes
        self.gated = gated  # credentials or a Content-Encoding: the gate sees each request
        self.authorization = authorization
        self.expects_continue = expects_continue


_NO_HEAD = _Head(None, {}, False, True, True, "", False)

# (method, request target) -> (method, the Event's method, HEAD, raw path, path, query) of
# a target that passed the gate's target and method checks: clients ask the same few URLs.
_Target = tuple[str, str, bool, bytes, str, str]
_MAX_TARGETS = 256


def _target(method_bytes: bytes, url: bytes) -> _Target:
    method = method_bytes.decode("ascii")
    path, _, query = url.partition(b"?")
    head_only = method == "HEAD"  # HEAD answers as GET, without the body
    return (
        method,
        "GET" if head_only else method,
        head_only,
        path,
        request_path(url),
        query.decode("latin-1"),
    )


class HTTPProtocol(asyncio.Protocol):
    """One connection: parse requests, answer them one at a time, in order."""

    def __init__(self, owner: HTTPServer) -> None:
        self.owner = owner
        self.settings = settings = owner.settings
        self.auth_enabled = settings.auth_enabled
        self.max_url_bytes = settings.max_url_bytes
        self.max_headers = settings.max_headers
        self.max_header_bytes = settings.max_header_bytes
        self.max_body_bytes = settings.max_body_bytes
        self.write_buffer_bytes = settings.write_buffer_bytes
        self.targets = owner.targets
        self.responses = owner.responses
        self.server = owner.graph_server
        self.loop = owner.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head = _NO_HEAD
        self.body: list[bytes] = []
        self.queue: deque[tuple[Event | Response | bytes, bool, bool]] = deque()
        self.busy = False  # a request is being answered
        self.closing = False  # no more requests: answer the queued ones, then close
        self.lost = False
        self.continue_pending = False
        self.idle_since = self.loop.time()
        self.head_since: float | None = None  # when the head now being read began
        self.body_since: float | None = None  # when the body now being read began
        self.body_bytes = 0
        self.refusal: bytes | None = None
        self.client: str | None = None  # the peer's address, once counted in owner.clients
        self.local: str | None = None  # the address it was accepted on (a traced one's)
        self.bucket: RateBucket | None = None  # its request rate, when one is set
        self.reading = True
        self.queued_bytes = 0  # the bodies of the pipelined requests waiting in ``queue``
        self.unread_since: float | None = None  # since when answers wait on the client
        self.unread = sys.maxsize  # what was left unread at the last sweep
        self.waiting = False  # an answer is out, the next waits for the client to read
        self.streaming: asyncio.Task[None] | None = None  # writing a streamed answer
        self.writable: asyncio.Future[None] | None = None  # the stream waits for the client

    # ---- connection -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # an asyncio.Transport (the loop's create_server)
        if len(self.owner.connections) >= self.settings.max_connections:
            self.lost = True
            self._count(503, "")  # no request read: no method
            self.transport.write(closing_bytes(_TOO_MANY_CONNECTIONS))
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        client = peer[0] if isinstance(peer, tuple) else ""  # "": a Unix socket's
        clients = self.owner.clients
        if not clients.admit(client):
            self.lost = True
            self._count(429, "")  # no request read: no method
            self.transport.write(closing_bytes(TOO_MANY_CONNECTIONS))
            transport.close()
            return
        self.client = client
        if tracing.on:  # the address it was accepted on: a span's ``server.address``
            sockname = transport.get_extra_info("sockname")
            self.local = sockname[0] if isinstance(sockname, tuple) else None
        self.bucket = clients.bucket(client, self.loop.time())
        self.owner.connections.add(self)
        bound = self.write_buffer_bytes
        self.transport.set_write_buffer_limits(high=bound, low=bound // 4)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.streaming is not None:  # the client left: its stream is closed
            self.streaming.cancel()
        self.owner.connections.discard(self)
        if self.client is not None:
            self.owner.clients.release(self.client)
            self.client = None

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.idle_since = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no protocol upgrades: the request was answered as a plain one
        except httptools.HttpParserError:
            refusal = self.refusal
            if refusal is None and self.head_since is not None:
                if len(self.headers) > self.max_headers:  # refused before the bad byte came
                    refusal = closing_bytes(self._headers_too_large())
            self._close_with(refusal or _BAD_REQUEST)
            return
        if self.head_since is not None and self._head_too_large(self.headers):
            # a head still coming in, over a limit already (a whole one: on_headers_complete)
            self._close_with(closing_bytes(self._headers_too_large()))

    def _close_with(self, refusal: bytes) -> None:
        """Read no more: answer the requests before it, then ``refusal``, then close."""
        # the method of the refused request, when its request line was read
        self._count(int(refusal[9:12]), self.parser.get_method().decode() if self.url else "")
        self.closing = True
        self.head_since = None
        self._enqueue((refusal, False, False))

    def pause_writing(self) -> None:
        """The client left ``write_buffer_bytes`` unread: read and answer nothing more
        until it reads (or ``write_timeout`` passes: the sweep cuts the connection)."""
        self.unread_since = self.loop.time()
        self.unread = sys.maxsize
        self._flow()

    def resume_writing(self) -> None:
        self.unread_since = None
        writable, self.writable = self.writable, None
        if writable is not None and not writable.done():  # a stream goes on
            writable.set_result(None)
        if self.waiting:  # the next request's turn, held while the client read
            self.waiting = False
            self._start(self.queue.popleft())
        self._flow()

    def _flow(self) -> None:
        """Read while the client reads its answers and the pipelined requests are few."""
        reading = (
            self.unread_since is None
            and len(self.queue) < _MAX_PIPELINED
            and self.queued_bytes <= self.write_buffer_bytes
        )
        if reading != self.reading and not self.lost:
            self.reading = reading
            if reading:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()

    def drain(self) -> None:
        """Stop taking requests; close now if idle, else after the queued answers."""
        self.closing = True
        if not self.busy:
            self.transport.close()

    # ---- httptools callbacks ---------------------------------------------------------

    def refuse(self, response: Response) -> None:
        """Answer ``response`` after the requests before it, then close; read no more."""
        self.refusal = closing_bytes(response)
        raise _Refused(response.status_code)

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body_bytes = 0
        self.head_since = self.idle_since  # the head began in the data being fed now

    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > self.max_url_bytes:
            limit = self.max_url_bytes
            self.refuse(Response({"error": f"the URL exceeds {limit} bytes"}, 414))

    def on_header(self, name: bytes, value: bytes) -> None:
        # lines are counted and their bytes summed after each read (data_received) and
        # for a whole new head (on_headers_complete), not line by line
        self.headers.append((name, value))

    def _head_too_large(self, lines: list[tuple[bytes, bytes]]) -> bool:
        return len(lines) > self.max_headers or gate.header_bytes(lines) > self.max_header_bytes

    def _headers_too_large(self) -> Response:
        limits = f"{self.max_headers} fields or {self.max_header_bytes} bytes"
        return Response({"error": f"request headers exceed {limits}"}, 431)

    def on_headers_complete(self) -> None:
        self.head_since = None
        self.body_since = self.idle_since  # the body's time starts (a GET's ends at once)
        head = self.head
        if self.headers != head.raw:  # else the lines the last request sent: decoded already
            head = self.head = self._read_head(self.headers)
        if head.has_body and self.auth_enabled:  # no body is buffered for a stranger
            refused = authorize(self.settings, request_path(self.url), head.authorization)
            if refused is not None:
                self.refuse(refused)
        if head.expects_continue:
            if self.busy:
                self.continue_pending = True  # written when the answers before it are out
                self.body_since = None  # timed from then
            else:
                self.transport.write(_CONTINUE)

    def _read_head(self, raw: list[tuple[bytes, bytes]]) -> _Head:
        """The header lines decoded; too many lines or bytes, or a declared body
        over the body limit, are refused."""
        if self._head_too_large(raw):
            self.refuse(self._headers_too_large())
        limit = self.max_body_bytes
        headers: dict[str, str] = {}
        has_body = False
        declared = False
        chunked = False
        authorization = ""
        expects_continue = False
        for name, value in raw:
            key = name.decode("latin-1").lower()
            headers[key] = text = value.decode("latin-1")
            if key == "content-length" and value.strip().isdigit():
                if int(value) > limit:
                    self.refuse(gate.too_large(limit))
                has_body = has_body or int(value) > 0
                declared = True
            elif key == "transfer-encoding":
                has_body = chunked = True
            elif key == "authorization":
                authorization = text
            elif key == "expect":
                expects_continue = expects_continue or value.lower() == b"100-continue"
        gated = self.auth_enabled or "content-encoding" in headers
        streamed = chunked or not declared
        return _Head(raw, headers, has_body, streamed, gated, authorization, expects_continue)

    def on_body(self, body: bytes) -> None:
        if self.head.streamed:  # chunked: counted as it comes (a declared length was checked)
            self.body_bytes += len(body)
            if self.body_bytes > self.max_body_bytes:
                self.refuse(gate.too_large(self.max_body_bytes))
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.continue_pending = False
        self.body_since = None
        body = b"".join(self.body)  # one chunk: that very bytes object
        self.body = []  # the chunks are not kept beside the joined body
        parser = self.parser
        keep_alive = parser.should_keep_alive()
        if not keep_alive:
            self.closing = True
        head = self.head
        headers = head.headers.copy()
        key = (parser.get_method(), self.url)
        known = self.targets.get(key)
        target = known or _target(*key)
        method, event_method, head_only, raw_path, path, query = target
        if self.bucket is not None:  # a request rate is set: this address's turn?
            wait = self.bucket.take(self.loop.time())
            if wait:
                self._count(429, method)
                self._enqueue((rate_limited(wait), keep_alive, head_only))
                return
        # a known target passed the target and method checks: only credentials and the
        # body's encoding are left to check, and only when there are any
        if known is None or head.gated:
            refused = gate.admit(self.settings, method, raw_path, path, headers)
            if refused is not None:
                self._count(refused.status_code, method)
                self._enqueue((refused, keep_alive, head_only))
                return
            if known is None and not query:
                self._remember(key, target)
        # positional: matching keywords cost more than the three Nones (id, time, offset)
        event = Event(
            body or None, head.content_type, headers, event_method, path, None, _HTTP_TRIGGER,
            None, None, query
        )  # fmt: skip
        if self.busy:
            self.queued_bytes += len(body)
            self._enqueue((event, keep_alive, head_only))
        else:  # nothing before it: answered now (what ``_enqueue`` and ``_start`` would do)
            self.busy = True
            answer = self._traced if tracing.on else self._answer
            self.loop.create_task(answer(event, keep_alive, head_only))

    def _remember(self, key: tuple[bytes, bytes], target: _Target) -> None:
        """Cache an admitted target (bounded: a client that invents URLs empties it)."""
        if len(self.targets) >= _MAX_TARGETS:
            self.targets.clear()
        self.targets[key] = target

    # ---- answering --------------------------------------------------------------------

    def _enqueue(self, item: tuple[Event | Response | bytes, bool, bool]) -> None:
        if self.busy:
            self.queue.append(item)
            if len(self.queue) >= _MAX_PIPELINED or self.queued_bytes > self.write_buffer_bytes:
                self._flow()
            return
        self.busy = True
        self._start(item)

    def _start(self, item: tuple[Event | Response | bytes, bool, bool]) -> None:
        event, keep_alive, head_only = item
        if isinstance(event, bytes):
            self._finish(event, False)
        elif isinstance(event, Response):
            keep_alive = keep_alive and not (self.closing and not self.queue)
            self._finish(response_bytes(encode_response(event), keep_alive, head_only), keep_alive)
        else:
            self.queued_bytes -= len(event.body or b"")
            answer = self._traced if tracing.on else self._answer
            self.loop.create_task(answer(event, keep_alive, head_only))

    async def _traced(self, event: Event, keep_alive: bool, head_only: bool) -> Response:
        """``_answer`` inside the request's server span (docs/observability.md#tracing)."""
        method = "HEAD" if head_only else event.method
        body_size = len(event.body or b"")
        span = spans.opened(method, event.path, event.headers, body_size, self.client, self.local)
        if span is None:
            return await self._answer(event, keep_alive, head_only)
        with span:
            response = await self._answer(event, keep_alive, head_only)
            spans.answered(span, response, request_log.request_id(event) if span.sampled else None)
            return response

    async def _answer(self, event: Event, keep_alive: bool, head_only: bool) -> Response:
        headers = event.headers
        path = event.path  # the router rewrites it to the operation
        started = 0.0
        if request_log.track:  # JSON logs or the access log: the lines name the request
            started = time.perf_counter()
            request_log.current.set((event, path))
        try:
            if "content-encoding" in headers and event.body:
                response = await self._decoded_answer(event)
            else:  # gate.answer, without a coroutine of its own for the common answer
                accept = gate.accepted_encoding(event.path, headers)
                response = await self.server.run_async(event)
                ready = gate.encoded(response, accept)
                response = (
                    ready if ready is not None else await gate.encoded_async(response, accept)
                )
        except Exception:
            logger.exception("request %s %s failed", event.method, event.path)
            response = _SERVER_ERROR
        # mlserve_http_responses_total, inline (the common answer): _count's work
        method = "HEAD" if head_only else event.method
        key = (response.status_code, method if method in HTTP_METHODS else "other")
        counts = self.responses
        counts[key] = counts.get(key, 0) + 1
        if isinstance(response.body, ChunkStream):  # (a Response of this request's own)
            response.headers = {**response.headers, "x-request-id": request_log.request_id(event)}
            await self._stream(response, path, keep_alive, head_only)
            return response
        keep_alive = keep_alive and not (self.closing and not self.queue)
        rid = request_log.request_id(event)
        self._finish(response_bytes(response, keep_alive, head_only, rid), keep_alive)
        if request_log.access and spans.http_route(method, path) is not None:  # no probes
            size = len(response.body) if isinstance(response.body, bytes) else 0
            peer = self.transport.get_extra_info("peername")
            client = str(peer[0]) if isinstance(peer, tuple) else ""
            model = request_log.model_of(path, event)
            status = response.status_code
            request_log.log_access(method, path, status, started, size, client, rid, model)
        return response

    async def _stream(
        self, response: Response, path: str, keep_alive: bool, head_only: bool
    ) -> None:
        """Write a streamed answer: chunked (close-delimited to an HTTP/1.0 client),
        each chunk an event written as it comes; then the next request's turn."""
        stream: ChunkStream = response.body
        if self.lost:  # the client left while the first chunk was made
            await stream.aclose()
            return
        parser = getattr(self, "parser", None)  # (gone once a timed-out head closes it)
        chunked = parser is None or parser.get_http_version() != "1.0"  # (a pipeline's own)
        keep_alive = keep_alive and chunked and not (self.closing and not self.queue)
        status = response.status_code
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"]
        head += [
            f"{name}: {value}\r\n" for name, value in gate.event_stream_headers(response).items()
        ]
        if chunked:
            head.append("transfer-encoding: chunked\r\n")
        if not keep_alive:
            head.append("connection: close\r\n")
        events = _Events(self, ("".join(head) + "\r\n").encode("latin-1"), chunked)
        if head_only:
            await stream.aclose()
            self._finish(events.framed([]), keep_alive)
            return
        self.streaming = asyncio.current_task()
        try:
            last = await gate.write_events(self.server, stream, path, events.write)
        finally:
            self.streaming = None
        keep_alive = keep_alive and not (self.closing and not self.queue)
        self._finish(events.framed(last) + (b"0\r\n\r\n" if chunked else b""), keep_alive)

    def _write_plain(self, data: bytes) -> Awaitable[None] | None:
        """Write ``data`` now; while the client leaves ``write_buffer_bytes`` unread, the
        wait for it to read (no next chunk is pulled: the model waits too), as long as
        ``write_timeout`` lets it (the sweep cuts the connection, which cancels the
        stream)."""
        if self.lost:  # (the stream is being cancelled)
            return None
        self.transport.write(data)
        if self.unread_since is None:
            return None
        writable = self.writable
        if writable is None:  # resume_writing resolves it (a future: unawaited, it is just dropped)
            writable = self.writable = self.loop.create_future()
        return writable

    async def _decoded_answer(self, event: Event) -> Response:
        """The answer to a body sent with a Content-Encoding: decoded first (a 400 or
        413 when it cannot be), then answered as any other."""
        headers = event.headers
        try:
            event.body = await gate.decode_body_async(
                event.body, headers["content-encoding"], self.max_body_bytes
            )
        except MLServeError as exc:
            return encode_response(self.server.error_response(exc))
        return await gate.answer(self.server, event, headers)

    def _count(self, status: int, method: str) -> None:
        """One answer in ``mlserve_http_responses_total`` (``method`` "": none was read)."""
        key = (status, method_label(method) if method else method)
        self.responses[key] = self.responses.get(key, 0) + 1

    def _finish(self, data: bytes, keep_alive: bool) -> None:
        if self.lost:
            return
        self.transport.write(data)
        if not keep_alive:
            self.transport.close()
            return
        self.idle_since = self.loop.time()
        if self.queue:
            if self.unread_since is not None:  # the client reads no more: resume_writing
                self.waiting = True  # starts the next
                return
            self._start(self.queue.popleft())
            if not self.reading:
                self._flow()
            return
        self.busy = False
        if self.closing:
            self.transport.close()
        elif self.continue_pending:
            self.continue_pending = False
            self.body_since = self.loop.time()  # the body it waited for may come now
            self.transport.write(_CONTINUE)


class _Events:
    """How a streamed answer's events reach its socket: the head goes with the first
    of them (alone when the stream waits for its first chunk), each write one HTTP
    chunk (close-delimited to an HTTP/1.0 client): one send per batch of events."""

    __slots__ = ("conn", "head", "chunked")

    def __init__(self, conn: HTTPProtocol, head: bytes, chunked: bool) -> None:
        self.conn = conn
        self.head = head  # b"" once sent
        self.chunked = chunked

    def framed(self, events: list[bytes]) -> bytes:
        data = b"".join(events)
        if data and self.chunked:
            data = b"%x\r\n%b\r\n" % (len(data), data)
        if self.head:
            data, self.head = self.head + data, b""
        return data

    def write(self, events: list[bytes]) -> Awaitable[None] | None:
        data = self.framed(events)
        return self.conn._write_plain(data) if data else None


class HTTPServer:
    """Serves a GraphServer on a bound socket; ``shutdown()`` drains it."""

    def __init__(self, graph_server: GraphServer, settings: FaceSettings | None = None) -> None:
        self.graph_server = graph_server
        self.settings = settings or FaceSettings()
        self.connections: set[HTTPProtocol] = set()
        self.targets: dict[tuple[bytes, bytes], _Target] = {}  # admitted request targets
        self.responses = http_counts()  # answers by (status, method), for /metrics
        settings = self.settings
        self.clients = Clients(settings.max_connections_per_client, settings.max_client_rate)
        self.draining = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    async def start(self, sock: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        """Listen on ``sock``; with ``tls``, every connection is TLS (docs/security.md#tls),
        and a handshake not done within ``header_timeout`` is dropped."""
        self.loop = asyncio.get_running_loop()
        self._server = await self.loop.create_server(
            lambda: HTTPProtocol(self),
            sock=sock,
            backlog=2048,
            ssl=tls,
            ssl_handshake_timeout=self.settings.header_timeout if tls else None,
        )
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    @property
    def _sweep_every(self) -> float:
        settings = self.settings
        timeouts = (settings.keep_alive_timeout, settings.header_timeout, settings.body_timeout)
        return min(1.0, settings.write_timeout / 2, *(timeout / 2 for timeout in timeouts))

    def _sweep(self) -> None:
        """Close keep-alive connections idle too long; answer 408 to heads and bodies
        that take too long (slowloris: one dripped byte by byte is closed after
        ``header_timeout`` or ``body_timeout``); cut a connection whose answers stay
        unread ``write_timeout``, or, while draining, a sweep without its client reading."""
        now = self.loop.time()
        settings = self.settings
        idle_limit = now - settings.keep_alive_timeout
        head_limit = now - settings.header_timeout
        body_limit = now - settings.body_timeout
        write_limit = now - settings.write_timeout
        for conn in list(self.connections):
            if conn.unread_since is None and conn.transport.is_closing():
                conn.unread_since = now  # closed, its last answer not yet read
                conn.unread = sys.maxsize
            if conn.unread_since is not None:
                left = conn.transport.get_write_buffer_size()
                if conn.unread_since < write_limit or (self.draining and left >= conn.unread):
                    conn.transport.abort()  # what it left unread is dropped
                else:
                    conn.unread = left
            elif conn.head_since is not None and conn.head_since < head_limit and not conn.closing:
                conn._close_with(closing_bytes(_HEAD_TIMEOUT))
                del conn.parser  # no more parsing: data_received sees closing
            elif conn.body_since is not None and conn.body_since < body_limit and not conn.closing:
                conn.body = []  # what came of it is not kept
                conn._close_with(closing_bytes(_BODY_TIMEOUT))
                del conn.parser
            elif not conn.busy and conn.head_since is None and conn.idle_since < idle_limit:
                conn.transport.close()
        self.clients.prune(now)
        self._sweeper = self.loop.call_later(self._sweep_every, self._sweep)

    async def shutdown(self) -> None:
        """Stop accepting, let the requests in flight finish, close every connection."""
        if self._server is not None:
            self._server.close()
        self.draining = True  # the sweep cuts a connection whose client stopped reading
        for conn in list(self.connections):
            conn.drain()
        while self.connections:
            await asyncio.sleep(0.02)
        if self._sweeper is not None:
            self._sweeper.cancel()
