"""``mlserve.monitoring.otel.setup_tracing``: on only with an endpoint, the standard
environment honoured (service name, resource attributes, sampler, protocol), spans
exported over both protocols, and a missing ``otel`` extra is one line, not a failure."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from mlserve.core import tracing
from mlserve.monitoring import otel
from tests.netserver import ROOT, start_server
from tests.services import free_port, wait_for_port

pytest.importorskip("opentelemetry.sdk", reason="tracing needs the otel extra")

from tests.otlp_receiver import GrpcReceiver, HttpReceiver  # noqa: E402

_OTEL_ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _OTEL_ENV:
        monkeypatch.delenv(name, raising=False)
    yield
    otel.shutdown_tracing()


def test_off_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not otel.wanted(None)
    assert otel.setup_tracing(None, None, None) is False
    assert not tracing.on
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert otel.wanted(None)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not otel.wanted(None)
    assert not otel.wanted("http://127.0.0.1:4318")


def test_a_protocol_it_does_not_speak_is_refused() -> None:
    with pytest.raises(ValueError, match="http/protobuf or grpc"):
        otel.setup_tracing("http://127.0.0.1:1", "http/json", None)
    assert not tracing.on


def test_spans_reach_an_http_collector_with_the_standard_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = HttpReceiver()
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    try:
        assert otel.setup_tracing(receiver.endpoint, None, "my-function")
        with tracing.server_span("GET /x", None, {"url.path": "/x"}):
            with tracing.span("predict"):
                pass
        otel.shutdown_tracing()  # sends what is queued
        spans = receiver.wait_spans(2)
    finally:
        receiver.stop()
    assert {span["name"] for span in spans} == {"GET /x", "predict"}
    resource = spans[0]["resource"]
    assert resource["service.name"] == "my-function"
    assert resource["deployment.environment"] == "test"


def test_headers_compression_and_the_queue_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = HttpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%20cret, tenant = t1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "3")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "10")  # more than the queue: 3
    try:
        assert otel.setup_tracing(f"127.0.0.1:{receiver.port}", None, None)  # no scheme: http
        for _ in range(5):  # two more than the queue holds, before any export
            with tracing.server_span("GET /x", None, {}):
                pass
        otel.shutdown_tracing()
        spans = receiver.wait_spans(3)
    finally:
        receiver.stop()
    assert len(spans) == 3
    sent = receiver.headers[0]
    assert sent["api-key"] == "s cret" and sent["tenant"] == "t1"
    assert sent["content-encoding"] == "gzip"


def test_service_name_from_the_resource_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = HttpReceiver()
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    try:
        assert otel.setup_tracing(receiver.endpoint, None, "my-function")
        with tracing.server_span("GET /x", None, {}):
            pass
        otel.shutdown_tracing()
        spans = receiver.wait_spans(1)
    finally:
        receiver.stop()
    assert spans[0]["service.name"] == "from-attributes"


def test_each_worker_exports_its_own_spans() -> None:
    receiver = HttpReceiver()
    args = ("--workers", "2", "--ready-min-workers", "2", "--otel-endpoint", receiver.endpoint)
    server = start_server(*args)
    try:
        deadline = time.monotonic() + 60
        while httpx.get(server.url + "/v2/health/ready").status_code != 200:
            assert time.monotonic() < deadline, "the two workers never served"
            time.sleep(0.2)
        body = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [7]}]}
        for _ in range(40):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client() as client:
                assert client.post(server.url + "/v2/models/echo/infer", json=body).is_success
        pids = receiver.wait(
            lambda spans: (
                pids if len(pids := {s["resource"]["process.pid"] for s in spans}) == 2 else None
            )
        )
    finally:
        server.stop()
        receiver.stop()
    assert server.proc.pid not in pids  # the supervisor serves nothing, traces nothing


def test_the_environment_picks_grpc_the_name_and_the_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = GrpcReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    try:
        assert otel.setup_tracing(None, None, "my-function")
        with tracing.server_span("unsampled", None, {}):  # ratio 0: never sampled
            pass
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with tracing.server_span("sampled by its caller", {"traceparent": parent}, {}):
            pass
        otel.shutdown_tracing()
        spans = receiver.wait_spans(1)
    finally:
        receiver.stop()
    assert [span["name"] for span in spans] == ["sampled by its caller"]
    assert spans[0]["service.name"] == "from-env"


def test_without_the_extra_one_line_and_serving_goes_on() -> None:
    port = free_port()
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from mlserve.cli import main\n"
        f"main(['serve', 'tests/http/fn.py', '--port', '{port}',"
        " '--otel-endpoint', 'http://127.0.0.1:1'])\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, timeout=60, proc=proc)
        answer = httpx.post(
            f"http://127.0.0.1:{port}/v2/models/echo/infer",
            json={"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [7]}]},
        )
        assert answer.status_code == 200, answer.text
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    said = [line for line in err.splitlines() if "otel extra" in line]
    assert said == ["mlserve: tracing needs the otel extra: pip install 'mlserve[otel]'"]
