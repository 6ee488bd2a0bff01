"""OTLP for the spans of :mod:`mlserve.core.tracing`: the protobuf bytes of an
``ExportTraceServiceRequest`` and the two ways to send them, OTLP/HTTP and OTLP/gRPC
(docs/observability.md#tracing).

The bytes are written by hand, field by field in the protobuf wire format of
``opentelemetry/proto/trace/v1/trace.proto``: the resource and the scope once, and a
span's attributes once per value (they repeat: the model, the route, a status), so a
span costs about two microseconds where building ``opentelemetry-proto``'s message
costs ten and the SDK's encoder forty. The tests decode every export with
``opentelemetry-proto``, as a collector does.
"""

from __future__ import annotations

import gzip
import http.client
import ssl
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

from mlserve.core.tracing import Span

__all__ = ["GrpcSender", "HttpSender", "SpanEncoder"]

_KINDS = {"internal": b"\x30\x01", "server": b"\x30\x02", "client": b"\x30\x03"}
_KINDS |= {"producer": b"\x30\x04", "consumer": b"\x30\x05"}
_TIMES = struct.Struct("<BQBQ")  # fields 7 and 8: fixed64 start and end
# fields 1, 2 (and 4): the trace id's two halves, the span's id (and its parent's), big-endian
_ROOT_IDS = struct.Struct(">2sQQ2sQ")
_CHILD_IDS = struct.Struct(">2sQQ2sQ2sQ")
_LOW = (1 << 64) - 1
_DOUBLE = struct.Struct("<d")
_BYTES = [bytes((number,)) for number in range(0x80)]
_VALUES_KEPT = 64  # an attribute's encodings kept per key: more values, and none are
_REMOTE_FLAGS = b"\x85\x01" + (0x301).to_bytes(4, "little")  # sampled, parent: remote
_LOCAL_FLAGS = b"\x85\x01" + (0x101).to_bytes(4, "little")  # sampled, parent: local
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _varint(number: int) -> bytes:
    if number < 0x80:
        return _BYTES[number]
    if number < 0x4000:  # a span's length, mostly: two bytes
        return bytes(((number & 0x7F) | 0x80, number >> 7))
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    return tag + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An ``AnyValue``: string, bool, int, double, or an array of them."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, list | tuple):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(item)) for item in value))
    if isinstance(value, bytes):
        return _field(b"\x3a", value)
    return _field(b"\x0a", str(value).encode())


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` message's bytes."""
    return _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))


class SpanEncoder:
    """Spans to the bytes of one ``ExportTraceServiceRequest`` for ``resource``."""

    def __init__(self, resource: Mapping[str, Any], scope: str, version: str) -> None:
        resource_bytes = b"".join(  # Resource.attributes
            _field(b"\x0a", _key_value(key, value)) for key, value in resource.items()
        )
        scope_bytes = _field(b"\x0a", scope.encode()) + _field(b"\x12", version.encode())
        self.resource_field = _field(b"\x0a", resource_bytes)  # ResourceSpans.resource
        self.scope_field = _field(b"\x0a", scope_bytes)  # ScopeSpans.scope
        # per key: its KeyValue.key field, and the encodings of the values seen (None
        # once there were too many: a request id, a path with ids in it)
        self.keys: dict[str, tuple[bytes, dict[Any, bytes] | None]] = {}
        self.heads: dict[str, tuple[str, bytes]] = {}  # name: (kind, fields 5 and 6)

    def request(self, encoded: list[bytes]) -> bytes:
        """The export of spans already encoded by :meth:`span`."""
        scope_spans = self.scope_field + b"".join(encoded)
        resource_spans = self.resource_field + _field(b"\x12", scope_spans)
        return _field(b"\x0a", resource_spans)

    def _attribute(self, key: str, value: Any) -> bytes:
        """A span's attribute field (9); the bytes kept for a key's few repeating values."""
        entry = self.keys.get(key)
        if entry is None:
            entry = self.keys[key] = (_field(b"\x0a", key.encode()), {})
        kept = entry[1]
        if kept is None or isinstance(value, list):
            return _field(b"\x4a", entry[0] + _field(b"\x12", _any_value(value)))
        known = value if type(value) is str else (value, type(value))  # True apart from 1
        found = kept.get(known)
        if found is None:
            found = _field(b"\x4a", entry[0] + _field(b"\x12", _any_value(value)))
            if len(kept) < _VALUES_KEPT:
                kept[known] = found
            else:
                self.keys[key] = (entry[0], None)
        return found

    def _head(self, span: Span) -> tuple[str, bytes]:
        """A span name's and kind's fields (5 and 6), kept: span names are few."""
        head = (span.kind, _field(b"\x2a", span.name.encode()) + _KINDS[span.kind])
        if len(self.heads) < 4096:
            self.heads[span.name] = head
        return head

    def span(self, span: Span) -> bytes:
        """One span's bytes, as a field of ``ScopeSpans`` (fields in any order, as
        protobuf allows: the fixed ones first, in one ``struct`` call each)."""
        head = self.heads.get(span.name)
        if head is None or head[0] != span.kind:
            head = self._head(span)
        trace_id = span.trace_id
        if span.parent_id:
            ids = _CHILD_IDS.pack(
                b"\x0a\x10", trace_id >> 64, trace_id & _LOW, b"\x12\x08", span.span_id,
                b"\x22\x08", span.parent_id,
            )  # fmt: skip
        else:
            ids = _ROOT_IDS.pack(
                b"\x0a\x10", trace_id >> 64, trace_id & _LOW, b"\x12\x08", span.span_id
            )
        parts = [ids, head[1], _TIMES.pack(0x39, span.start_ns, 0x41, span.end_ns)]
        attributes = span.attributes
        parts.extend(map(self._attribute, attributes.keys(), attributes.values()))
        if span.trace_state:
            parts.append(_field(b"\x1a", span.trace_state.encode()))
        for event_name, at, event_attributes in span.events:
            event = b"\x09" + struct.pack("<Q", at) + _field(b"\x12", event_name.encode())
            event += b"".join(
                _field(b"\x1a", _key_value(k, v)) for k, v in event_attributes.items()
            )
            parts.append(_field(b"\x5a", event))
        for linked_trace, linked_span in span.links:
            link = b"\x0a\x10" + linked_trace.to_bytes(16, "big")
            parts.append(_field(b"\x6a", link + b"\x12\x08" + linked_span.to_bytes(8, "big")))
        if span.error is not None:  # Status: message (2), code ERROR (3 = 2)
            status = (_field(b"\x12", span.error.encode()) if span.error else b"") + b"\x18\x02"
            parts.append(_field(b"\x7a", status))
        # flags (16): the sampled bit, and whether the parent was a remote caller
        parts.append(_REMOTE_FLAGS if span.remote_parent else _LOCAL_FLAGS)
        body = b"".join(parts)
        return b"\x12" + _varint(len(body)) + body  # ScopeSpans.spans


class HttpSender:
    """POSTs an export to an OTLP/HTTP ``/v1/traces`` URL on one kept-alive connection."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        timeout: float,
        compression: str | None,
        certificate: str | None,
    ) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.path = parts.path or "/v1/traces"
        self.timeout = timeout
        self.gzip = compression == "gzip"
        self.headers = {"Content-Type": "application/x-protobuf", **headers}
        if self.gzip:
            self.headers["Content-Encoding"] = "gzip"
        self.tls = ssl.create_default_context(cafile=certificate) if self.https else None
        self.connection: http.client.HTTPConnection | None = None

    def send(self, body: bytes) -> None:
        """Send one export; raises when the collector is down or refuses it."""
        if self.gzip:
            body = gzip.compress(body)
        for attempt in (1, 2):  # a kept-alive connection the collector closed: once more
            connection = self.connection or self._connect()
            try:
                connection.request("POST", self.path, body, self.headers)
                answer = connection.getresponse()
                answer.read()
            except (OSError, http.client.HTTPException):
                connection.close()
                self.connection = None
                if attempt == 2:
                    raise
                continue
            if answer.will_close:
                connection.close()
                self.connection = None
            if not 200 <= answer.status < 300:
                raise ConnectionError(f"the OTLP collector answered {answer.status}")
            return

    def _connect(self) -> http.client.HTTPConnection:
        if self.https:
            self.connection = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self.tls
            )
        else:
            self.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self.connection

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()


class GrpcSender:
    """Calls ``TraceService/Export`` on an OTLP/gRPC collector with the encoded bytes."""

    def __init__(
        self,
        target: str,
        secure: bool,
        headers: Mapping[str, str],
        timeout: float,
        compression: str | None,
        certificate: str | None,
    ) -> None:
        if secure:
            roots = Path(certificate).read_bytes() if certificate else None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
            self.channel = grpc.secure_channel(target, credentials)
        else:
            self.channel = grpc.insecure_channel(target)
        self.export = self.channel.unary_unary(_EXPORT)  # bytes in, bytes out
        self.metadata = tuple((key.lower(), value) for key, value in headers.items())
        self.timeout = timeout
        self.compression = grpc.Compression.Gzip if compression == "gzip" else None

    def send(self, body: bytes) -> None:
        """Send one export; raises ``ConnectionError`` when the collector is down or refuses,
        saying its gRPC status (a ``grpc.RpcError``'s own text is a multi-line dump whose
        first line, all the drop warning shows, names nothing)."""
        try:
            self.export(
                body, timeout=self.timeout, metadata=self.metadata, compression=self.compression
            )
        except grpc.RpcError as error:
            code, details = getattr(error, "code", None), getattr(error, "details", None)
            said = f"{code().name}: {details()}" if code and details else type(error).__name__
            raise ConnectionError(f"gRPC {said}") from error

    def close(self) -> None:
        self.channel.close()
