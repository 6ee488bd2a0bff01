"""``mlserve.core.tracing`` (spans, W3C propagation, sampling), the OTLP bytes of
``mlserve.monitoring.otlp`` decoded by ``opentelemetry-proto`` as a collector decodes
them, and the bounded queue of ``mlserve.monitoring.span_queue``: a full queue drops
and counts, a collector that hangs or fails never holds a request."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from mlserve.core import tracing
from mlserve.monitoring.otlp import GrpcSender, SpanEncoder
from mlserve.monitoring.span_queue import SPANS_DROPPED, SpanQueue
from tests.fixtures import Multiplier, serve
from tests.services import free_port

TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = "b7ad6b7169203331"


@pytest.fixture
def spans() -> Iterator[list[tracing.Span]]:
    collected: list[tracing.Span] = []
    tracing.enable(collected.append)
    yield collected
    tracing.disable()


def _named(collected: list[tracing.Span]) -> dict[str, tracing.Span]:
    return {span.name: span for span in collected}


def test_off_starts_no_span_and_knows_no_trace() -> None:
    assert not tracing.on
    with tracing.server_span("GET /x", {"traceparent": f"00-{TRACE}-{PARENT}-01"}, {}) as span:
        assert span is None
        assert tracing.trace_id() is None
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {}


def test_server_span_continues_the_callers_traceparent(spans: list[tracing.Span]) -> None:
    headers = {"Traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "vendor=1"}
    with tracing.server_span("POST /v2/models/{model}/infer", headers, {"mlserve.model": "m"}):
        assert tracing.trace_id() == TRACE
        with tracing.span("predict", {"mlserve.model": "m"}):
            sent: dict[str, str] = {}
            tracing.inject(sent)
    server, child = _named(spans)["POST /v2/models/{model}/infer"], _named(spans)["predict"]
    assert server.kind == "server"
    assert server.remote_parent and f"{server.parent_id:016x}" == PARENT
    assert f"{server.trace_id:032x}" == TRACE
    assert child.parent_id == server.span_id and not child.remote_parent
    assert child.attributes == {"mlserve.model": "m"}
    version, trace, span_id, flags = sent["traceparent"].split("-")
    assert (version, trace, flags) == ("00", TRACE, "01")
    assert span_id == f"{child.span_id:016x}"
    assert sent["tracestate"] == "vendor=1"


def test_server_span_without_traceparent_starts_a_trace(spans: list[tracing.Span]) -> None:
    with tracing.server_span("outer", None, {}):  # a server span never hangs under another
        with tracing.server_span("GET /", None, {}):
            inner = tracing.trace_id()
        outer = tracing.trace_id()
    named = _named(spans)
    assert named["GET /"].parent_id == 0
    assert inner is not None and outer is not None and inner != outer


@pytest.mark.parametrize(
    "value",
    [
        "00-zz-nonsense",
        f"00-{'0' * 32}-{PARENT}-01",  # an all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # an all-zero parent
        f"ff-{TRACE}-{PARENT}-01",  # the forbidden version
        f"00-{TRACE}-{PARENT}-01-more",  # version 00 has exactly four fields
        f"00-{TRACE.upper()}-{PARENT}-01",  # hex is lowercase
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(spans: list[tracing.Span], value: str) -> None:
    with tracing.server_span("GET /x", {"traceparent": value}, {}):
        assert tracing.trace_id() not in (None, TRACE)
    assert _named(spans)["GET /x"].parent_id == 0


def test_a_later_version_with_more_fields_is_read() -> None:
    found = tracing.parse_traceparent(f"01-{TRACE}-{PARENT}-00-extra")
    assert found == (int(TRACE, 16), int(PARENT, 16), False)


def test_outside_any_span_no_ids_and_no_orphan_span(spans: list[tracing.Span]) -> None:
    assert tracing.trace_id() is None
    assert tracing.span_id() is None
    with tracing.span("orphan") as orphan:
        assert orphan is None
    assert spans == []


def test_links_kinds_and_status(spans: list[tracing.Span]) -> None:
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
    assert batch_span.kind == "producer"
    assert list(batch_span.links) == linked
    assert batch_span.error is not None
    assert named["client"].kind == "client"
    assert named["client"].error is None  # a 4xx is the caller's
    assert named["client"].attributes == {"http.response.status_code": 404}


def test_an_exception_marks_its_span_an_error(spans: list[tracing.Span]) -> None:
    with pytest.raises(ValueError), tracing.server_span("GET /x", None, {}):
        raise ValueError("broken")
    failed = _named(spans)["GET /x"]
    assert failed.error == "ValueError: broken"
    assert [event[0] for event in failed.events] == ["exception"]
    assert failed.events[0][2]["exception.type"] == "ValueError"


def test_copy_context_carries_the_span_to_a_thread(spans: list[tracing.Span]) -> None:
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
    assert named["on a thread"].parent_id == named["GET /x"].span_id


def test_a_trace_not_sampled_records_nothing_but_goes_on() -> None:
    collected: list[tracing.Span] = []
    tracing.enable(collected.append, lambda trace_id: False)  # always_off, parent-based
    try:
        with tracing.server_span("GET /x", None, {}) as server:
            assert not server.sampled and tracing.trace_id() is not None
            assert not tracing.recording()
            with tracing.span("predict") as child:
                assert child is None  # nothing recorded that would not be sent
                sent: dict[str, str] = {}
                tracing.inject(sent)
        assert sent["traceparent"].endswith("-00")  # the callee learns it is not sampled
        assert sent["traceparent"].split("-")[1] == f"{server.trace_id:032x}"
        caller = {"traceparent": f"00-{TRACE}-{PARENT}-01"}
        with tracing.server_span("sampled by its caller", caller, {}):
            assert tracing.recording()
    finally:
        tracing.disable()
    assert [span.name for span in collected] == ["sampled by its caller"]


def test_a_ratio_sampler_that_ignores_the_parent() -> None:
    collected: list[tracing.Span] = []
    tracing.enable(collected.append, lambda trace_id: False, follow_parent=False)
    try:
        with tracing.server_span("x", {"traceparent": f"00-{TRACE}-{PARENT}-01"}, {}):
            pass
    finally:
        tracing.disable()
    assert collected == []


def _exported(encoder: SpanEncoder, spans: list[tracing.Span]) -> bytes:
    """The bytes of one export of ``spans``, each encoded as the span queue does."""
    return encoder.request([encoder.span(span) for span in spans])


def _decoded(body: bytes) -> list[dict[str, object]]:
    from tests.otlp_receiver import decode, trace_service_pb2

    return decode(trace_service_pb2.ExportTraceServiceRequest.FromString(body))


def test_the_otlp_bytes_decode_as_a_collector_reads_them(spans: list[tracing.Span]) -> None:
    pytest.importorskip("opentelemetry.proto", reason="the tests decode with opentelemetry-proto")
    attributes = {"s": "text", "i": -3, "f": 0.5, "b": True, "l": [1, 2], "u": "é"}
    headers = {"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "k=v"}
    with tracing.server_span("GET /x", headers, dict(attributes)) as server:
        tracing.set_status(server, 500)
        with tracing.span("batch", {"n": 1}, links=[(int(TRACE, 16), 5)], kind="producer"):
            pass
    with pytest.raises(KeyError), tracing.server_span("failed", None, {}):
        raise KeyError("k")
    encoder = SpanEncoder({"service.name": "svc", "process.pid": 7}, "mlserve", "1.0")
    first = _decoded(_exported(encoder, spans))
    again = _decoded(_exported(encoder, spans))  # from the kept encodings this time
    assert first == again
    named = {span["name"]: span for span in first}
    server_span, batch, failed = named["GET /x"], named["batch"], named["failed"]
    assert server_span["trace_id"] == TRACE and server_span["parent_span_id"] == PARENT
    assert server_span["kind"] == "server"
    assert server_span["attributes"] == {**attributes, "http.response.status_code": 500}
    assert server_span["status"] == {"code": "error", "message": ""}
    assert server_span["resource"] == {"service.name": "svc", "process.pid": 7}
    assert server_span["start_ns"] == spans[1].start_ns and server_span["end_ns"] == spans[1].end_ns
    assert batch["kind"] == "producer" and batch["parent_span_id"] == server_span["span_id"]
    assert batch["links"] == [{"trace_id": TRACE, "span_id": f"{5:016x}"}]
    assert failed["status"] == {"code": "error", "message": "KeyError: 'k'"}
    assert failed["events"] == ["exception"] and failed["parent_span_id"] is None


class _Sender:
    """A collector that hangs until released, or refuses: what the queue sends to."""

    def __init__(self, hang: bool = False, fail: bool = False) -> None:
        self.hang, self.fail = hang, fail
        self.release = threading.Event()
        self.entered = threading.Event()
        self.sent: list[int] = []  # spans per export

    def send(self, body: bytes) -> None:
        self.entered.set()
        if self.hang:
            self.release.wait(60)
        if self.fail:
            raise ConnectionError("collector down")
        self.sent.append(len(_decoded(body)))

    def close(self) -> None:
        self.release.set()


def _encoder() -> SpanEncoder:
    return SpanEncoder({"service.name": "tests"}, "mlserve", "0")


def test_a_full_queue_drops_and_counts_and_never_blocks() -> None:
    pytest.importorskip("opentelemetry.proto", reason="the tests decode with opentelemetry-proto")
    sender = _Sender(hang=True)
    queue = SpanQueue(_encoder(), sender, max_queue=4, batch=2, interval=0.05)
    tracing.enable(queue.put)
    before = SPANS_DROPPED._value.get()
    try:
        with tracing.server_span("first", None, {}):
            pass
        assert sender.entered.wait(30)  # the export thread now hangs on the first batch
        for i in range(20):
            with tracing.server_span(f"s{i}", None, {}):
                pass
        assert len(queue.queue) == 4
        assert queue.dropped == 16
        assert SPANS_DROPPED._value.get() - before == 16
    finally:
        tracing.disable()
        sender.release.set()
        queue.shutdown()
    assert sum(sender.sent) == 5  # the first, then the four the queue held
    assert not queue.thread.is_alive()


def test_spans_of_a_failed_export_are_counted_as_dropped() -> None:
    sender = _Sender(fail=True)
    queue = SpanQueue(_encoder(), sender, interval=0.01)
    tracing.enable(queue.put)
    try:
        for _ in range(3):
            with tracing.server_span("s", None, {}):
                pass
        queue.flush()
        with tracing.server_span("s", None, {}):
            pass
        queue.flush()
        assert queue.dropped == 4
        assert queue.thread.is_alive()  # the thread lives on after a failed export
    finally:
        tracing.disable()
        queue.shutdown()


def test_a_failed_grpc_export_says_its_status_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The warning shows the error's first line; a ``grpc.RpcError``'s says nothing."""
    pytest.importorskip("grpc", reason="OTLP/gRPC needs grpcio")
    nowhere = GrpcSender(f"127.0.0.1:{free_port()}", False, {}, 5.0, None, None)
    queue = SpanQueue(_encoder(), nowhere, interval=60)
    tracing.enable(queue.put)
    try:
        with tracing.server_span("s", None, {}):
            pass
        with caplog.at_level("WARNING", logger="mlserve.tracing"):
            queue.flush()
    finally:
        tracing.disable()
        queue.shutdown()
    assert queue.dropped == 1
    [warning] = [r.getMessage() for r in caplog.records if "could not export" in r.getMessage()]
    assert "(gRPC UNAVAILABLE: " in warning, warning


def test_a_collector_that_hangs_never_holds_a_request() -> None:
    sender = _Sender(hang=True)
    queue = SpanQueue(_encoder(), sender, max_queue=8, batch=1)
    tracing.enable(queue.put)
    try:
        server = serve({"m": (Multiplier, {"multiplier": 3})})
        assert server.test("/v2/models/m/infer", {"inputs": [1]}, trace=True)["outputs"] == [3]
        assert sender.entered.wait(30)  # the export thread now hangs on that request's spans
        for i in range(40):  # far more spans than the queue holds
            body = {"id": f"r{i}", "inputs": [i]}
            answer = server.test("/v2/models/m/infer", body, trace=True)
            assert answer["outputs"] == [3 * i]
        assert queue.dropped > 0
    finally:
        tracing.disable()
        sender.release.set()
        queue.shutdown()


def test_a_key_of_many_values_is_encoded_right_past_the_kept_ones(
    spans: list[tracing.Span],
) -> None:
    pytest.importorskip("opentelemetry.proto", reason="the tests decode with opentelemetry-proto")
    for i in range(100):  # a request id: a value per span, more than a key keeps
        with tracing.server_span("GET /x", None, {"mlserve.request.id": f"r{i}", "n": i % 2}):
            pass
    encoder = _encoder()
    for _ in range(2):  # the second time: from what was kept, and what was not
        decoded = _decoded(_exported(encoder, spans))
        assert [span["attributes"] for span in decoded] == [
            {"mlserve.request.id": f"r{i}", "n": i % 2} for i in range(100)
        ]


def test_spans_of_opentelemetrys_own_api_join_the_trace(spans: list[tracing.Span]) -> None:
    """A model that traces with OpenTelemetry's API (its own provider, here the SDK's
    in-memory exporter) parents its spans on mlserve's through ``otel_context``."""
    pytest.importorskip("opentelemetry.sdk", reason="tracing needs the otel extra")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("a model's own")
    assert tracing.otel_context() is None  # outside a span: OpenTelemetry's own context
    with tracing.server_span("POST /x", None, {}), tracing.span("predict") as predict:
        with tracer.start_as_current_span("my lookup", context=tracing.otel_context()):
            pass
    (mine,) = exporter.get_finished_spans()
    assert mine.context.trace_id == predict.trace_id
    assert mine.parent is not None and mine.parent.span_id == predict.span_id
    provider.shutdown()
