"""Traces of real ``mlserve serve`` processes, as an OTLP collector receives them: the span
tree of a router call over HTTP and gRPC (a caller's ``traceparent`` continued), one trace
across a ``$remote`` step, across a Kafka queue between two functions and through the Kafka
trigger to its output topic, a batch's links, no span for probes, the service name, both
export protocols, a collector that is down under load, and JSON logs naming the trace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.netserver import ROOT, ServerProcess, start_server
from tests.otlp_receiver import GrpcReceiver, HttpReceiver, Spans, ancestors, named, summary
from tests.services import ProcessService, free_port

pytest.importorskip("opentelemetry.sdk", reason="tracing needs the otel extra")

FN = "tests/tracing/fn.py"
INFER = "POST /v2/models/{model}/infer"
GRPC_INFER = "inference.GRPCInferenceService/ModelInfer"
REQUESTS = 1500  # 5 spans each: more than the span queue holds while exports fail
PROBES = ["/v2/health/ready", "/v2/health/live", "/v2/models/hooks/ready", "/metrics", "/"]


# tritonclient's gRPC stubs and mlserve's share proto names, so the two cannot be imported
# in one process (mlserve/grpc/__init__.py): other tests here import mlserve's.
TRITON_CALL = """
import sys
import numpy as np
import tritonclient.grpc as grpcclient
client = grpcclient.InferenceServerClient(sys.argv[1])
tensor = grpcclient.InferInput("x", [1, 2], "FP32")
tensor.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
result = client.infer("hooks", [tensor], headers={"traceparent": sys.argv[2]})
print(result.get_response().model_name)
"""

TRITON_STREAM = """
import queue, sys
import numpy as np
import tritonclient.grpc as grpcclient
client = grpcclient.InferenceServerClient(sys.argv[1])
answers = queue.Queue()
client.start_stream(
    lambda result, error: answers.put((result, error)), headers={"traceparent": sys.argv[2]}
)
tensor = grpcclient.InferInput("x", [1, 2], "FP32")
tensor.set_data_from_numpy(np.array([[1, 2]], dtype=np.float32))
client.async_stream_infer("hooks", [tensor], request_id="s1")
result, error = answers.get(timeout=30)
client.stop_stream()
print(error or result.get_response().id)
"""


def traced(receiver: HttpReceiver | GrpcReceiver, *args: str, **env: str) -> ServerProcess:
    return start_server(
        "--otel-endpoint", receiver.endpoint, *args, target=FN, env={"TRACE_FN": "router", **env}
    )


def traceparent() -> tuple[str, str, str]:
    """A caller's (trace id, span id, ``traceparent`` header), sampled."""
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return trace, parent, f"00-{trace}-{parent}-01"


@pytest.fixture(scope="module")
def receiver() -> Iterator[HttpReceiver]:
    received = HttpReceiver()
    yield received
    received.stop()


@pytest.fixture(scope="module")
def server(receiver: HttpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The router function, traced, with JSON logs and the access log in ``server.log``."""
    log = tmp_path_factory.mktemp("traced") / "server.log"
    with log.open("wb") as sink:
        process = start_server(
            "--otel-endpoint",
            receiver.endpoint,
            "--log-format",
            "json",
            "--access-log",
            target=FN,
            env={"TRACE_FN": "router", "OTEL_SERVICE_NAME": "traced-router"},
            stderr=sink,
        )
    process.log = log  # type: ignore[attr-defined]
    yield process
    process.stop()


def logged(server: ServerProcess, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first line of the server's JSON log that is ``wanted``, once written (a line is
    written as its answer goes out); every line read is one JSON object with the fields."""
    deadline = time.monotonic() + 10
    while True:
        for line in server.log.read_text().splitlines():  # type: ignore[attr-defined]
            record = json.loads(line)
            assert {"time", "level", "logger", "message"} <= record.keys(), record
            if wanted(record):
                return record
        assert time.monotonic() < deadline, server.log.read_text()[-2000:]  # type: ignore[attr-defined]
        time.sleep(0.05)


def infer(server: ServerProcess, model: str, body: dict[str, Any], **headers: str) -> Any:
    answer = httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer


def test_a_router_call_is_one_tree_server_route_hooks(
    server: ServerProcess, receiver: HttpReceiver
) -> None:
    receiver.clear()
    request_id = uuid.uuid4().hex
    infer(server, "hooks", {"id": request_id, "inputs": [1, 2]})
    spans = receiver.wait_trace({INFER, "route hooks", "preprocess", "predict", "postprocess"})
    root = named(spans, INFER)
    assert root["kind"] == "server" and root["parent_span_id"] is None
    route = named(spans, "route hooks")
    assert root in ancestors(spans, route)
    for hook in ("preprocess", "predict", "postprocess"):
        span = named(spans, hook)
        assert route in ancestors(spans, span), summary(spans)
        assert span["attributes"]["mlserve.model"] == "hooks"
    attributes = root["attributes"]
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v2/models/{model}/infer"
    assert attributes["url.path"] == "/v2/models/hooks/infer"
    assert attributes["http.response.status_code"] == 200
    assert attributes["mlserve.model"] == "hooks"
    assert root["status"]["code"] != "error"
    assert attributes["http.request.body.size"] > 0 and attributes["http.response.body.size"] > 0
    assert root["service.name"] == "traced-router"  # OTEL_SERVICE_NAME
    assert attributes["mlserve.request.id"] == request_id


def test_an_incoming_traceparent_is_continued_over_grpc(
    server: ServerProcess, receiver: HttpReceiver
) -> None:
    trace, parent, header = traceparent()
    done = subprocess.run(  # tritonclient in a process of its own (see TRITON_CALL)
        [sys.executable, "-c", TRITON_CALL, server.grpc_address, header],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "hooks", done.stderr
    spans = receiver.wait_trace({GRPC_INFER, "predict"}, lambda s: s["trace_id"] == trace)
    root = named(spans, GRPC_INFER)
    assert root["kind"] == "server" and root["parent_span_id"] == parent
    assert root["attributes"]["rpc.system"] == "grpc"
    assert root["attributes"]["rpc.method"] == "ModelInfer"
    assert root["attributes"]["mlserve.model"] == "hooks"
    assert root in ancestors(spans, named(spans, "predict"))


def test_a_grpc_stream_is_one_span_and_its_access_line_names_the_trace(
    server: ServerProcess, receiver: HttpReceiver
) -> None:
    trace, parent, header = traceparent()
    done = subprocess.run(  # tritonclient in a process of its own (see TRITON_CALL)
        [sys.executable, "-c", TRITON_STREAM, server.grpc_address, header],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout.strip() == "s1", done.stderr
    stream = "inference.GRPCInferenceService/ModelStreamInfer"
    spans = receiver.wait_trace({stream, "predict"}, lambda s: s["trace_id"] == trace)
    root = named(spans, stream)
    assert root["kind"] == "server" and root["parent_span_id"] == parent
    assert root in ancestors(spans, named(spans, "predict"))

    record = logged(server, lambda r: r.get("path") == f"/{stream}" and r.get("trace_id") == trace)
    assert record["status"] == 0 and re.fullmatch(r"[0-9a-f]{32}", record["request_id"])


def test_a_batch_span_links_the_requests_it_merged(
    server: ServerProcess, receiver: HttpReceiver
) -> None:
    callers = [traceparent() for _ in range(4)]
    body = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
    with ThreadPoolExecutor(len(callers)) as pool:
        list(pool.map(lambda c: infer(server, "batched", body, traceparent=c[2]), callers))
    ours = {trace for trace, _, _ in callers}

    def merged(spans: Spans) -> dict[str, Any] | None:
        batches = [
            span
            for span in spans
            if span["name"] == "batch batched"
            and len({link["trace_id"] for link in span["links"]} & ours) >= 2
        ]
        return batches[0] if batches else None

    batch = receiver.wait(merged)
    assert {link["trace_id"] for link in batch["links"]} <= ours
    linked = {link["span_id"] for link in batch["links"]}
    spans = receiver.wait(lambda spans: spans if linked <= {s["span_id"] for s in spans} else None)
    assert all(s["trace_id"] in ours for s in spans if s["span_id"] in linked)


def test_probes_and_metrics_make_no_span(server: ServerProcess, receiver: HttpReceiver) -> None:
    for path in PROBES:
        assert httpx.get(f"{server.url}{path}").status_code == 200, path
    trace, _, header = traceparent()  # a request after the probes: its spans come after
    infer(server, "hooks", {"inputs": [3]}, traceparent=header)
    receiver.wait_trace({INFER}, lambda span: span["trace_id"] == trace)
    probed = [span for span in receiver.spans if span["attributes"].get("url.path") in PROBES] + [
        span for span in receiver.spans if re.search(r"health|ready|metrics", span["name"])
    ]
    assert probed == [], summary(probed)


def test_json_logs_and_the_access_log_carry_the_request_and_trace_ids(
    server: ServerProcess, receiver: HttpReceiver
) -> None:
    request_id = uuid.uuid4().hex
    trace, _, header = traceparent()
    answer = infer(server, "hooks", {"id": request_id, "inputs": [4]}, traceparent=header)
    assert answer.headers["x-request-id"] == request_id
    generated = infer(server, "hooks", {"inputs": [5]}).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    receiver.wait_trace({INFER}, lambda span: span["trace_id"] == trace)

    record = logged(server, lambda r: r.get("request_id") == request_id and "status" in r)
    assert record["trace_id"] == trace
    assert record["status"] == 200 and record["method"] == "POST"
    assert record["path"] == "/v2/models/hooks/infer" and record["model"] == "hooks"


def test_a_remote_step_continues_the_trace_in_the_second_function(
    server: ServerProcess, receiver: HttpReceiver
) -> None:
    remote = f"{server.url}/v2/models/hooks/infer"
    front = traced(receiver, TRACE_FN="flow", REMOTE_URL=remote, OTEL_SERVICE_NAME="front")
    try:
        answer = httpx.post(front.url, json={"inputs": [1, 2]})
        assert answer.status_code == 200, answer.text
        spans = receiver.wait_trace(
            {"step prep", "step score", f"remote {remote}", INFER, "predict"},
            lambda span: span["service.name"] == "front",
        )
    finally:
        front.stop()
    client = named(spans, f"remote {remote}")
    assert client["kind"] == "client" and client["service.name"] == "front"
    second = named(spans, INFER)
    assert second["parent_span_id"] == client["span_id"]
    assert second["service.name"] == "traced-router"
    roots = [span for span in spans if span["parent_span_id"] is None]
    assert len(roots) == 1 and roots[0]["service.name"] == "front"
    assert roots[0] in ancestors(spans, named(spans, "predict"))


def test_a_kafka_queue_between_two_functions_is_one_trace(
    kafka: ProcessService, receiver: HttpReceiver
) -> None:
    topic = f"trace-{uuid.uuid4().hex[:8]}"
    env = {"TRACE_FN": "split", "QUEUE_URL": f"kafka://{kafka.url}?topic={topic}"}
    root = traced(receiver, OTEL_SERVICE_NAME="root", **env)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.tracing.queue_child", receiver.endpoint],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"consuming\n"
        answer = httpx.post(root.url, json=1)
        assert answer.status_code == 200, answer.text
        spans = receiver.wait_trace(
            {"step prep", "step score"}, lambda span: span["service.name"] == "queue-child"
        )
    finally:
        child.terminate()
        child.wait(30)
        root.stop()
    services = {span["service.name"] for span in spans}
    assert services == {"root", "queue-child"}, summary(spans)
    producer = [s for s in spans if s["kind"] == "producer" and s["service.name"] == "root"]
    consumer = [s for s in spans if s["kind"] == "consumer"]
    assert len(producer) == 1 and len(consumer) == 1, summary(spans)
    assert producer[0] in ancestors(spans, consumer[0])
    assert consumer[0]["attributes"]["messaging.system"] == "kafka"
    assert consumer[0]["attributes"]["messaging.destination.name"] == topic
    assert consumer[0] in ancestors(spans, named(spans, "step score"))
    roots = [span for span in spans if span["parent_span_id"] is None]
    assert len(roots) == 1 and roots[0]["service.name"] == "root"


def test_spans_export_over_otlp_grpc() -> None:
    receiver = GrpcReceiver()
    server = traced(receiver, OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    try:
        trace, _, header = traceparent()
        infer(server, "hooks", {"inputs": [1]}, traceparent=header)
        spans = receiver.wait_trace({INFER, "predict"}, lambda s: s["trace_id"] == trace)
    finally:
        server.stop()
        receiver.stop()
    assert named(spans, INFER)["service.name"]


def test_a_collector_that_is_down_fails_no_request_and_drops_are_counted() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = start_server(
        "--otel-endpoint",
        nowhere,
        target=FN,
        env={"TRACE_FN": "router"},
    )
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:

            def call(i: int) -> int:
                return client.post("/v2/models/hooks/infer", json={"inputs": [i]}).status_code

            with ThreadPoolExecutor(8) as pool:
                statuses = list(pool.map(call, range(REQUESTS)))
            assert statuses == [200] * REQUESTS
            metrics = client.get("/metrics").text
    finally:
        server.stop()
    dropped = re.search(r"^mlserve_trace_spans_dropped_total(?:\{[^}]*\})? (\S+)$", metrics, re.M)
    assert dropped is not None, "no mlserve_trace_spans_dropped_total on /metrics"
    assert float(dropped[1]) > 0


def test_the_kafka_trigger_continues_a_message_trace_and_its_answer_carries_it(
    kafka: ProcessService, receiver: HttpReceiver
) -> None:
    from tests.kafka import topics

    tag = uuid.uuid4().hex[:8]
    source, output = f"trace-in-{tag}", f"trace-out-{tag}"
    trace, parent, header = traceparent()
    message = json.dumps({"model": "double", "inputs": [1]}).encode()
    topics.produce(kafka.url, source, [(b"k1", message, [("traceparent", header.encode())])])
    server = start_server(
        "--kafka",
        f"{source}@{kafka.url}",
        "--group",
        f"group-{tag}",
        "--output-topic",
        output,
        "--otel-endpoint",
        receiver.endpoint,
        target="tests/kafka/fn.py",
        env={"OTEL_SERVICE_NAME": "kafka-trigger"},
    )
    try:
        [answer] = topics.read(kafka.url, output, 1)
        spans = receiver.wait_trace(
            {f"{source} process", f"{output} publish", "predict"},
            lambda span: span["trace_id"] == trace,
        )
    finally:
        server.stop()
    consumer = named(spans, f"{source} process")
    assert consumer["kind"] == "consumer" and consumer["parent_span_id"] == parent
    assert consumer["attributes"]["messaging.system"] == "kafka"
    assert consumer["attributes"]["messaging.destination.name"] == source
    assert consumer["attributes"]["messaging.kafka.message.key"] == "k1"
    publish = named(spans, f"{output} publish")
    assert publish["kind"] == "producer" and consumer in ancestors(spans, publish)
    carried = dict(answer.headers() or [])["traceparent"].decode()
    assert carried.split("-")[1] == trace  # the answer's reader continues the same trace
