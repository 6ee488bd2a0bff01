"""What every HTTP face checks before a request reaches the server, and does to
the answer after: a safe request target, credentials, the method, the body's
Content-Encoding, and the response's compression. Both HTTP faces (the lean
server and the ASGI app) call the same functions, so they answer alike; the
target and method checks are the mock server's own (``GraphServer.test``).

Only a successful inference answer is compressed, as Triton does
(docs/security.md#http-manners): tritonclient's async client turns aiohttp's own
decompression off and inflates inference answers alone, while aiohttp asks for
gzip on every request. A streamed answer (a ``ChunkStream`` body) is never
compressed: each chunk is one server-sent event, written as it comes
(``write_events``).
"""

from __future__ import annotations

import re
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from itertools import chain
from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.events import Event, Response
from mlserve.core.settings import FaceSettings
from mlserve.core.streams import ChunkStream
from mlserve.protocol.errors import InvalidInput, PayloadTooLarge
from mlserve.protocol.names import target_error
from mlserve.protocol.tensors import dumps
from mlserve.server.auth import authorize
from mlserve.server.graph_server import (
    OFF_LOOP_BYTES,
    GraphServer,
    encode_response,
    encode_response_async,
    encodes_off_loop,
)
from mlserve.server.methods import method_refusal

__all__ = [
    "accepted_encoding",
    "admit",
    "check_target",
    "compress",
    "compress_async",
    "decode_body",
    "decode_body_async",
    "encoded",
    "encoded_async",
    "event_stream_headers",
    "too_large",
    "write_events",
]

_REFUSED = re.compile(r";\s*q=0(\.0*)?$")  # "gzip;q=0": not acceptable
_COMPRESSORS = {
    "gzip": lambda data: zlib.compress(data, 6, wbits=16 + zlib.MAX_WBITS),
    "deflate": lambda data: zlib.compress(data, 6),
}


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response({"error": message}, status, headers=headers)


def too_large(limit: int) -> Response:
    return _error(413, f"request body exceeds the limit of {limit} bytes")


def check_target(raw_path: bytes, path: str) -> Response | None:
    """A 400 for a target whose names could leave their place (``..``, NUL, encoded slashes)."""
    error = target_error(raw_path, path)
    return None if error is None else _error(400, f"InvalidInput: {error}")


def admit(
    settings: FaceSettings, method: str, raw_path: bytes, path: str, headers: dict[str, str]
) -> Response | None:
    """The answer to a request refused before the server, or None to go on."""
    return (
        check_target(raw_path, path)
        or authorize(
            settings, path, headers.get("authorization", ""), method, headers.get("accept", "")
        )
        or method_refusal(method, path)
        or _check_encoding(headers.get("content-encoding", ""))
    )


def _encodings(value: str) -> list[str]:
    return [part.strip().lower() for part in value.split(",") if part.strip()]


def _check_encoding(value: str) -> Response | None:
    if not value:
        return None
    unknown = [e for e in _encodings(value) if e not in ("gzip", "deflate", "identity")]
    if unknown:
        named = ", ".join(unknown)
        return _error(415, f"unsupported Content-Encoding {named}: use gzip or deflate")
    return None


def _inflate(data: bytes, encoding: str, limit: int) -> bytes:
    if encoding == "gzip":
        wbits = 16 + zlib.MAX_WBITS
    else:  # deflate: zlib-wrapped as RFC 9110 says; raw deflate as some clients send
        wbits = zlib.MAX_WBITS if data[:1] and (data[0] & 0x0F) == 8 else -zlib.MAX_WBITS
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InvalidInput(f"the body is not valid {encoding} data: {exc}") from exc
    if len(out) > limit:
        raise PayloadTooLarge(f"the decoded request body exceeds the limit of {limit} bytes")
    return out


def decode_body(body: bytes, content_encoding: str, limit: int) -> bytes:
    """The body without its Content-Encoding (applied in order, bounded by ``limit``)."""
    for encoding in reversed(_encodings(content_encoding)):
        if encoding != "identity" and body:
            body = _inflate(body, encoding, limit)
    return body


def accepted_encoding(path: str, headers: Mapping[str, str]) -> str:
    """The Accept-Encoding the answer to ``path`` follows: an inference's (``.../infer``)
    only, as Triton's; "" for any other route. Read before the graph runs (a router
    rewrites the event's path)."""
    accept = headers.get("accept-encoding")
    return accept if accept and path.endswith("/infer") else ""


def compress(response: Response, accept_encoding: str) -> Response:
    """The encoded response compressed as the client accepts (gzip, else deflate); an
    answer other than 200 stays plain (tritonclient reads an error's body as it is)."""
    body = response.body
    if (
        not accept_encoding
        or response.status_code != 200
        or not isinstance(body, bytes)
        or not body
    ):
        return response
    accepted = {
        e.partition(";")[0].strip() for e in _encodings(accept_encoding) if not _REFUSED.search(e)
    }
    for name, compressor in _COMPRESSORS.items():
        if name in accepted:
            headers = {**response.headers, "Content-Encoding": name, "Vary": "Accept-Encoding"}
            return Response(compressor(body), response.status_code, response.content_type, headers)
    return response


def header_bytes(lines: list[tuple[bytes, bytes]]) -> int:
    """The bytes of header lines as the limit counts them: name, value, ": " and CRLF."""
    return sum(map(len, chain.from_iterable(lines))) + 4 * len(lines)


async def answer(server: GraphServer, event: Event, headers: Mapping[str, str]) -> Response:
    """What both HTTP faces send for ``event``: the server's answer encoded (big tensors
    off the event loop), compressed when it is an inference's and the client accepts
    an encoding."""
    accept = accepted_encoding(event.path, headers)
    response = await server.run_async(event)
    ready = encoded(response, accept)
    return ready if ready is not None else await encoded_async(response, accept)


def encoded(response: Response, accept_encoding: str) -> Response | None:
    """``encoded_async`` when it would not suspend (no big tensors, no compression
    asked for), in a plain call: the common answer; else None. A stream is
    returned as it is (``write_events`` writes it)."""
    if isinstance(response.body, ChunkStream):
        return response
    if accept_encoding or encodes_off_loop(response):
        return None
    return encode_response(response)


async def encoded_async(response: Response, accept_encoding: str) -> Response:
    """The server's answer as a face sends it: encoded (big tensors off the event
    loop), compressed as ``accept_encoding`` (``accepted_encoding``) asks. A
    stream is returned as it is."""
    if isinstance(response.body, ChunkStream):
        return response
    if encodes_off_loop(response):
        response = await encode_response_async(response)
    else:
        response = encode_response(response)
    if not accept_encoding:
        return response
    return await compress_async(response, accept_encoding)


async def compress_async(response: Response, accept_encoding: str) -> Response:
    """``compress``; a big body is compressed off the event loop (it would stall
    every other connection, health checks included)."""
    body = response.body
    if accept_encoding and isinstance(body, bytes) and len(body) > OFF_LOOP_BYTES:
        return await run_in_threadpool(compress, response, accept_encoding)
    return compress(response, accept_encoding)


async def decode_body_async(body: bytes, content_encoding: str, limit: int) -> bytes:
    """``decode_body`` off the event loop: a small body may inflate up to ``limit``."""
    return await run_in_threadpool(decode_body, body, content_encoding, limit)


def event_stream_headers(response: Response) -> dict[str, str]:
    """The head fields of a streamed answer besides its framing, names in lower case
    (docs/protocol.md#streaming-over-http): the response's own after these."""
    fields = {"content-type": ChunkStream.media_type, "cache-control": "no-cache"}
    fields.update((name.lower(), str(value)) for name, value in response.headers.items())
    return fields


def _event(chunk: object) -> bytes:
    """One chunk as a server-sent event: ``data: <compact JSON>`` and a blank line."""
    return b"data: %b\n\n" % dumps(chunk)


# Events that come without waiting are joined into one write of at most this many bytes,
# held at most this long: one send per turn of the loop, not one per chunk.
_BATCH_BYTES = 16 * 1024
_BATCH_SECONDS = 0.001


class _Resumed:
    """The rest of a pull begun by hand (``send(None)``) that now waits on ``waiting``:
    awaiting this drives the pull on to its end, as ``await`` would have (a cancel
    included)."""

    __slots__ = ("pull", "waiting")

    def __init__(self, pull: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self.pull = pull
        self.waiting = waiting

    def __await__(self) -> Generator[Any, Any, Any]:
        pull, waiting = self.pull, self.waiting
        while True:
            try:
                sent = yield waiting
            except BaseException as exc:  # a cancel: into the pull, as await would
                try:
                    waiting = pull.throw(exc)
                except StopIteration as ended:
                    return ended.value
            else:
                try:
                    waiting = pull.send(sent)
                except StopIteration as ended:
                    return ended.value


async def write_events(
    server: GraphServer,
    stream: ChunkStream,
    path: str,
    write: Callable[[list[bytes]], Awaitable[None] | None],
) -> list[bytes]:
    """Write each chunk of ``stream`` as an event the moment it comes; an error that
    ends it becomes the last event (``event: error``, its text as ``error_response``
    gives it, so hidden errors stay hidden). The stream is closed however this ends
    (a cancel: the client left), so the model's generator ``finally`` runs.

    ``write`` sends events at once and returns None, or, while the client reads
    slowly, an awaitable that waits for it: no chunk is pulled meanwhile (but one
    already being pulled). The first chunk goes out alone (before it, ``write([])``
    when the stream must wait for it: the face may send what it holds); chunks after
    it that are ready without waiting (a sync generator's queued ones, an async
    generator's that did not suspend) go out together, before the stream waits for
    the next (docs/streaming.md#how-chunks-are-sent). Returns the last events, not
    written: the face sends them with the end of its answer."""
    batch: list[bytes] = []
    size, since = 0, 0.0
    waiting_client: Awaitable[None] | None = None
    try:
        while True:
            pull = stream.__anext__()
            try:
                try:
                    waiting = pull.send(None)  # the next chunk, when it is ready
                except StopIteration as ready:
                    chunk = ready.value
                else:  # it is not: what is held goes out before the stream waits
                    if batch or not stream.chunks:
                        waiting_client = write(batch)
                        batch, size = [], 0
                    chunk = await _Resumed(pull, waiting)
                    if waiting_client is not None:
                        await waiting_client
                        waiting_client = None
                data = _event(chunk)
            except StopAsyncIteration:
                break
            except Exception as exc:  # the model's error, a timeout, a chunk that is not JSON
                error = server.error_response(exc, path)
                batch.append(b"event: error\ndata: %b\n\n" % dumps(error.body))
                break
            if not batch:
                since = time.monotonic()
            batch.append(data)
            size += len(data)
            if (
                stream.chunks == 1
                or size >= _BATCH_BYTES
                or time.monotonic() - since > _BATCH_SECONDS
            ):
                waiting_client = write(batch)
                batch, size = [], 0
                if waiting_client is not None:
                    await waiting_client
                    waiting_client = None
        if waiting_client is not None:
            await waiting_client
        return batch
    finally:
        await stream.aclose()
