"""``mlserve.core.tracing`` against the SDK's in-memory exporter, and the bounded span
queue of ``mlserve.monitoring.span_queue``: a full queue drops and counts, an exporter
that hangs never holds a request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from mlserve.core import tracing

pytest.importorskip("opentelemetry.sdk", reason="tracing needs the otel extra")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from mlserve.monitoring.span_queue import SPANS_DROPPED, BoundedSpanProcessor  # noqa: E402
from tests.fixtures import Multiplier, serve  # noqa: E402

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider.get_tracer("tests"))
    yield exporter
    tracing.disable()
    provider.shutdown()


def _named(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_off_starts_no_span_and_knows_no_trace() -> None:
    assert not tracing.on
    with tracing.server_span("GET /x", {"traceparent": f"00-{TRACE}-{PARENT}-01"}, {}) as span:
        assert span is None
        assert tracing.trace_id() is None
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {}


def test_server_span_continues_the_callers_traceparent(spans: InMemorySpanExporter) -> None:
    headers = {"Traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "vendor=1"}
    with tracing.server_span("POST /v2/models/{model}/infer", headers, {"mlserve.model": "m"}):
        assert tracing.trace_id() == TRACE
        with tracing.span("predict", {"mlserve.model": "m"}):
            sent: dict[str, str] = {}
            tracing.inject(sent)
    server, child = _named(spans)["POST /v2/models/{model}/infer"], _named(spans)["predict"]
    assert server.kind is SpanKind.SERVER
    assert server.parent is not None and server.parent.is_remote
    assert f"{server.parent.span_id:016x}" == PARENT
    assert f"{server.context.trace_id:032x}" == TRACE
    assert child.parent is not None and child.parent.span_id == server.context.span_id
    assert child.attributes == {"mlserve.model": "m"}
    version, trace, span_id, flags = sent["traceparent"].split("-")
    assert (version, trace, flags) == ("00", TRACE, "01")
    assert span_id == f"{child.context.span_id:016x}"
    assert sent["tracestate"] == "vendor=1"


def test_server_span_without_traceparent_starts_a_trace(spans: InMemorySpanExporter) -> None:
    with tracing.server_span("outer", None, {}):  # a server span never hangs under another
        with tracing.server_span("GET /", None, {}):
            inner = tracing.trace_id()
        outer = tracing.trace_id()
    named = _named(spans)
    assert named["GET /"].parent is None
    assert inner is not None and outer is not None and inner != outer


def test_a_malformed_traceparent_starts_a_new_trace(spans: InMemorySpanExporter) -> None:
    with tracing.server_span("GET /x", {"traceparent": "00-zz-nonsense"}, {}):
        assert tracing.trace_id() not in (None, TRACE)
    assert _named(spans)["GET /x"].parent is None


def test_outside_any_span_no_ids_and_no_orphan_span(spans: InMemorySpanExporter) -> None:
    assert tracing.trace_id() is None
    assert tracing.span_id() is None
    with tracing.span("orphan") as orphan:
        assert orphan is None
    assert spans.get_finished_spans() == ()


def test_links_kinds_and_status(spans: InMemorySpanExporter) -> None:
    linked = []
    for name in ("a", "b"):
        with tracing.server_span(name, None, {}):
            linked.append(tracing.span_context())
    with tracing.server_span("caller", None, {}):
        with tracing.span("batch m", links=linked, kind="producer") as batch:
            tracing.set_status(batch, 503)
        with tracing.span("client", kind="client") as client:
            tracing.set_status(client, 404)
    named = _named(spans)
    batch_span = named["batch m"]
    assert batch_span.kind is SpanKind.PRODUCER
    assert [link.context.span_id for link in batch_span.links] == [c.span_id for c in linked]
    assert batch_span.status.status_code is StatusCode.ERROR
    assert named["client"].kind is SpanKind.CLIENT
    assert named["client"].status.status_code is StatusCode.UNSET  # a 4xx is the caller's
    assert named["client"].attributes == {"http.response.status_code": 404}


def test_an_exception_marks_its_span_an_error(spans: InMemorySpanExporter) -> None:
    with pytest.raises(ValueError), tracing.server_span("GET /x", None, {}):
        raise ValueError("broken")
    failed = _named(spans)["GET /x"]
    assert failed.status.status_code is StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]


def test_copy_context_carries_the_span_to_a_thread(spans: InMemorySpanExporter) -> None:
    seen: list[str | None] = []
    with tracing.server_span("GET /x", None, {}):
        context = tracing.copy_context()
        expected = tracing.trace_id()

        def work() -> None:
            seen.append(tracing.trace_id())
            with tracing.span("on a thread"):
                pass

        worker = threading.Thread(target=context.run, args=(work,))
        worker.start()
        worker.join()
        bare = threading.Thread(target=lambda: seen.append(tracing.trace_id()))
        bare.start()
        bare.join()
    assert seen == [expected, None]
    named = _named(spans)
    assert named["on a thread"].parent is not None
    assert named["on a thread"].parent.span_id == named["GET /x"].context.span_id


class _Hanging:
    """An exporter whose export waits until released: a collector that never answers."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.exported: list[Any] = []

    def export(self, batch: list[Any]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(60)
        self.exported.extend(batch)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_full_queue_drops_and_counts_and_never_blocks() -> None:
    exporter = _Hanging()
    processor = BoundedSpanProcessor(exporter, max_queue=4, batch=2, interval=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    before = SPANS_DROPPED._value.get()
    try:
        with tracer.start_as_current_span("first"):
            pass
        assert exporter.entered.wait(30)  # the export thread now hangs on the first batch
        for i in range(20):
            with tracer.start_as_current_span(f"s{i}"):
                pass
        assert len(processor.queue) == 4
        assert processor.dropped == 16
        assert SPANS_DROPPED._value.get() - before == 16
    finally:
        exporter.release.set()
        provider.shutdown()
    assert len(exporter.exported) == 5  # the first, then the four the queue held
    assert not processor.thread.is_alive()


def test_an_exporter_that_hangs_never_holds_a_request() -> None:
    exporter = _Hanging()
    provider = TracerProvider()
    provider.add_span_processor(BoundedSpanProcessor(exporter, max_queue=8, batch=1))
    tracing.enable(provider.get_tracer("tests"))
    try:
        server = serve({"m": (Multiplier, {"multiplier": 3})})
        for i in range(40):  # far more spans than the queue holds
            body = {"id": f"r{i}", "inputs": [i]}
            answer = server.test("/v2/models/m/infer", body, trace=True)
            assert answer["outputs"] == [3 * i]
        assert exporter.entered.is_set()
    finally:
        tracing.disable()
        exporter.release.set()
        provider.shutdown()


def test_a_failing_exporter_is_survived() -> None:
    class Failing:
        calls = 0

        def export(self, batch: list[Any]) -> SpanExportResult:
            Failing.calls += 1
            if Failing.calls == 1:
                raise ConnectionError("collector down")
            return SpanExportResult.FAILURE

        def shutdown(self) -> None:
            pass

    processor = BoundedSpanProcessor(Failing(), interval=0.01)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    for _ in range(2):
        with tracer.start_as_current_span("s"):
            pass
        processor.force_flush()
    assert Failing.calls >= 2
    assert processor.thread.is_alive()  # the thread lives on after an exporter raised
    provider.shutdown()
