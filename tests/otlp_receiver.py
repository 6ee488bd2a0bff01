"""A small OTLP collector for the tests: what a served function exports, as plain dicts.

Two receivers share one store of spans: ``HttpReceiver`` (OTLP/HTTP, ``POST /v1/traces``
with an ``application/x-protobuf`` body, gzip or not) and ``GrpcReceiver`` (OTLP/gRPC,
``TraceService/Export``). Both listen on 127.0.0.1 on a free port, in a thread of this
process, and decode with ``opentelemetry-proto``: the same bytes a real collector reads,
so a test checks what an operator's Jaeger would show. ``wait`` blocks on a condition until
the spans a test expects have come (an exporter sends in the background, in batches).
"""

from __future__ import annotations

import gzip
import http.server
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.services import free_port

Spans = list[dict[str, Any]]

KINDS = {
    Span.SPAN_KIND_UNSPECIFIED: "unspecified",
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_PRODUCER: "producer",
    Span.SPAN_KIND_CONSUMER: "consumer",
}
ENTRIES = ("server", "consumer")  # the kinds of span a caller's traceparent can parent
STATUS = {
    Status.STATUS_CODE_UNSET: "unset",
    Status.STATUS_CODE_OK: "ok",
    Status.STATUS_CODE_ERROR: "error",
}


def value(any_value: AnyValue) -> Any:
    """An attribute's value as Python: str, bool, int, float, list or dict."""
    which = any_value.WhichOneof("value")
    if which == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if which == "kvlist_value":
        return attributes(any_value.kvlist_value.values)
    if which is None:
        return None
    return getattr(any_value, which)


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value(pair.value) for pair in pairs}


def span_dict(span: Span, resource: dict[str, Any]) -> dict[str, Any]:
    """One span, ids as lowercase hex (``parent_span_id`` None for a root)."""
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex() or None,
        "name": span.name,
        "kind": KINDS[span.kind],
        "attributes": attributes(span.attributes),
        "links": [
            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex()} for link in span.links
        ],
        "status": {"code": STATUS[span.status.code], "message": span.status.message},
        "events": [event.name for event in span.events],
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "service.name": resource.get("service.name"),
        "resource": resource,
    }


def decode(request: trace_service_pb2.ExportTraceServiceRequest) -> Spans:
    spans = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            spans += [span_dict(span, resource) for span in scope_spans.spans]
    return spans


class Store:
    """The spans received so far, and a condition to wait on for more."""

    def __init__(self) -> None:
        self.spans: Spans = []
        self.exports = 0  # export requests received
        self.changed = threading.Condition()

    def add(self, spans: Spans) -> None:
        with self.changed:
            self.spans += spans
            self.exports += 1
            self.changed.notify_all()

    def clear(self) -> None:
        with self.changed:
            self.spans = []

    def wait(self, until: Callable[[Spans], Any], timeout: float = 30.0) -> Any:
        """Block until ``until(spans)`` is truthy (its value is returned); fail with the
        spans so far after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not (found := until(list(self.spans))):
                left = deadline - time.monotonic()
                assert left > 0, f"timed out; received: {summary(self.spans)}"
                self.changed.wait(left)
            return found

    def wait_spans(self, count: int, timeout: float = 30.0) -> Spans:
        """At least ``count`` spans."""
        return list(self.wait(lambda spans: spans if len(spans) >= count else None, timeout))

    def wait_trace(
        self,
        names: set[str],
        where: Callable[[dict[str, Any]], bool] = lambda span: True,
        timeout: float = 30.0,
    ) -> Spans:
        """The spans of the first trace that holds a span of each of ``names`` and one
        span for which ``where`` is true, once every parent in it has come (a complete
        tree: the exporters of several processes send at their own pace). A parent from
        outside (an incoming ``traceparent``) is allowed for the entry (server or consumer)
        span."""

        def complete(spans: Spans) -> Spans | None:
            for trace in by_trace(spans).values():
                ids = {span["span_id"] for span in trace}
                outside = {s["parent_span_id"] for s in trace if s["kind"] in ENTRIES}
                parents = {span["parent_span_id"] for span in trace} - {None} - ids
                if (
                    names <= {span["name"] for span in trace}
                    and any(where(span) for span in trace)
                    and (not parents or (len(parents) == 1 and parents <= outside))
                ):
                    return trace
            return None

        return list(self.wait(complete, timeout))


def by_trace(spans: Spans) -> dict[str, Spans]:
    traces: dict[str, Spans] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    return traces


def named(spans: Spans, name: str) -> dict[str, Any]:
    """The one span called ``name``."""
    found = [span for span in spans if span["name"] == name]
    assert len(found) == 1, (name, summary(spans))
    return found[0]


def ancestors(spans: Spans, span: dict[str, Any]) -> Spans:
    """``span``'s parent, its parent's parent, ... up to the root (within ``spans``)."""
    ids = {s["span_id"]: s for s in spans}
    chain = []
    while (parent := ids.get(span["parent_span_id"] or "")) is not None:
        chain.append(parent)
        span = parent
    return chain


def summary(spans: Spans) -> list[tuple[str, str, str | None, str]]:
    """(name, span id, parent id, trace id) of each span: what a failed assert shows."""
    return [(s["name"], s["span_id"], s["parent_span_id"], s["trace_id"][:8]) for s in spans]


class HttpReceiver(Store):
    """OTLP/HTTP: ``POST /v1/traces`` (protobuf), on a thread; ``endpoint`` is the base URL
    an exporter is given (it appends ``/v1/traces``). ``counting``: a benchmark's
    collector, which decodes each export and counts its spans (``count``) without
    keeping them, as cheaply as a collector in Go would."""

    def __init__(self, counting: bool = False) -> None:
        super().__init__()
        store = self
        self.count = 0
        self.headers: list[dict[str, str]] = []  # each export's request headers

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # kept alive, as a collector does

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                store.headers.append({k.lower(): v for k, v in self.headers.items()})
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or "protobuf" not in self.headers.get(
                    "Content-Type", ""
                ):
                    self.send_error(404 if self.path != "/v1/traces" else 415)
                    return
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                if counting:
                    scopes = [s for res in request.resource_spans for s in res.scope_spans]
                    store.count += sum(len(scope.spans) for scope in scopes)
                else:
                    store.add(decode(request))
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: pytest shows a failure's spans, not every POST."""

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver(Store):
    """OTLP/gRPC: the ``TraceService`` on a free port; ``endpoint`` as an exporter takes it."""

    def __init__(self) -> None:
        import grpc

        super().__init__()
        store = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(  # noqa: N802 (the service's name)
                self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
            ) -> trace_service_pb2.ExportTraceServiceResponse:
                store.add(decode(request))
                return trace_service_pb2.ExportTraceServiceResponse()

        self.port = free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(grace=None)


def receiving(kind: str = "http") -> Iterator[Store]:
    """A receiver for a fixture: started, yielded, stopped."""
    receiver: HttpReceiver | GrpcReceiver = HttpReceiver() if kind == "http" else GrpcReceiver()
    try:
        yield receiver
    finally:
        receiver.stop()
