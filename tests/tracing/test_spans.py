"""The spans each boundary makes, as tracing hands them to its sink: the tree and
names of a router call and of a flow, a batch linked to its requests, a caller's
``traceparent`` continued over HTTP and gRPC, no span for probes, the trace id in the
model-log record and in a monitor window; and tracing off imports no opentelemetry."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop

import mlserve
from mlserve.core import tracing
from mlserve.core.sockets import bind_socket
from mlserve.http.app import create_app
from mlserve.http.server import HTTPServer
from mlserve.monitoring.pusher import StreamPusher
from mlserve.monitoring.streams import open_stream
from mlserve.monitoring.windows import MAX_TRACE_IDS, PartitionWindows
from tests.netserver import ROOT
from tests.services import ProcessService, free_port
from tests.tracing.fn import Batched, Hooks

INFER = "POST /v2/models/{model}/infer"


class Counter(mlserve.V2ModelServer):
    """Streams ``inputs[0]`` chunks, 20 ms apart; notes when it yielded its last."""

    last_ns = 0

    def predict(self, request: Any) -> Iterator[Any]:
        for n in range(int(request["inputs"][0])):
            time.sleep(0.02)
            Counter.last_ns = time.time_ns()
            yield {"n": n}


def double(body: dict[str, Any]) -> dict[str, Any]:
    return {"x": body["x"] * 2}


def plus_one(body: dict[str, Any]) -> dict[str, Any]:
    return {"x": body["x"] + 1}


@pytest.fixture
def spans() -> Iterator[list[tracing.Span]]:
    """Tracing on, every ended span kept in a list; off again after the test."""
    collected: list[tracing.Span] = []
    tracing.enable(collected.append)
    try:
        yield collected
    finally:
        tracing.disable()


def router() -> mlserve.GraphServer:
    fn = mlserve.new_function("traced")
    fn.add_model("hooks", class_name=Hooks, model_path=".")
    fn.add_model("batched", class_name=Batched, model_path=".", max_batch_time=0.5)
    fn.add_model("counter", class_name=Counter, model_path=".")
    return fn.to_mock_server()


class Serving:
    """A router served by the lean HTTP face (and the gRPC face when ``grpc_face``) on a
    loop of its own."""

    def __init__(self, grpc_face: bool = False) -> None:
        self.server = router()
        self.http = HTTPServer(self.server)
        self.port, self.grpc_port = free_port(), free_port()
        self.loop = uvloop.new_event_loop()
        started = threading.Event()

        self.grpc: Any = None

        async def start() -> None:
            await self.http.start(bind_socket("127.0.0.1", self.port))
            if grpc_face:
                from mlserve.grpc.service import start_grpc_server

                self.grpc = await start_grpc_server(self.server, "127.0.0.1", self.grpc_port, "v2")

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def stop() -> None:
            if self.grpc is not None:
                await self.grpc.stop(None)
            await self.http.shutdown()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def serving() -> Iterator[Serving]:
    running = Serving()
    yield running
    running.stop()


def ended(collected: list[tracing.Span], name: str, count: int = 1) -> tuple[tracing.Span, ...]:
    """The ended spans once ``count`` of ``name`` have ended: a face ends its server
    span just after writing the answer, so the client may read it a moment before."""
    deadline = time.monotonic() + 10
    while len(by_name(tuple(collected), name)) < count:
        assert time.monotonic() < deadline, [span.name for span in tuple(collected)]
        time.sleep(0.01)
    return tuple(collected)


def by_name(finished: tuple[tracing.Span, ...], name: str) -> list[tracing.Span]:
    return [span for span in finished if span.name == name]


def one(finished: tuple[tracing.Span, ...], name: str) -> tracing.Span:
    found = by_name(finished, name)
    assert len(found) == 1, (name, [span.name for span in finished])
    return found[0]


def parent_of(finished: tuple[tracing.Span, ...], span: tracing.Span) -> tracing.Span:
    assert span.parent_id != 0, span.name
    return next(s for s in finished if s.span_id == span.parent_id)


def traceparent() -> tuple[str, str, str]:
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return trace, parent, f"00-{trace}-{parent}-01"


def test_router_call_is_one_tree(spans: list[tracing.Span], serving: Serving) -> None:
    request_id = uuid.uuid4().hex
    body = {"id": request_id, "inputs": [1, 2]}
    answer = httpx.post(f"{serving.url}/v2/models/hooks/infer", json=body)
    assert answer.status_code == 200
    finished = ended(spans, INFER)
    server = one(finished, INFER)
    assert server.kind == "server"
    assert server.parent_id == 0
    attributes = server.attributes
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v2/models/{model}/infer"
    assert attributes["url.path"] == "/v2/models/hooks/infer"
    assert attributes["http.response.status_code"] == 200
    assert attributes["mlserve.model"] == "hooks"
    assert attributes["http.response.body.size"] == int(answer.headers["content-length"])
    assert attributes["client.address"] == "127.0.0.1"
    assert attributes["mlserve.request.id"] == request_id == answer.headers["x-request-id"]
    route = one(finished, "route hooks")
    assert parent_of(finished, route) is server
    for hook in ("preprocess", "predict", "postprocess"):
        span = one(finished, hook)
        assert parent_of(finished, span) is route
        assert span.attributes["mlserve.model"] == "hooks"
    assert {span.trace_id for span in finished} == {server.trace_id}


def test_a_failed_call_is_an_error_only_when_5xx(
    spans: list[tracing.Span], serving: Serving
) -> None:
    answer = httpx.post(f"{serving.url}/v2/models/nothing/infer", json={"inputs": [1]})
    assert answer.status_code == 404
    server = one(ended(spans, INFER), INFER)
    assert server.attributes["http.response.status_code"] == 404
    assert server.error is None


def test_a_streamed_answer_ends_its_span_with_the_stream(
    spans: list[tracing.Span], serving: Serving
) -> None:
    url = f"{serving.url}/v2/models/counter/infer_stream"
    with httpx.stream("POST", url, json={"inputs": [5]}) as answer:
        chunks = [line for line in answer.iter_lines() if line.startswith("data:")]
    assert len(chunks) == 5
    name = "POST /v2/models/{model}/infer_stream"
    server = one(ended(spans, name), name)
    assert server.attributes["http.response.status_code"] == 200
    assert server.end_ns >= Counter.last_ns > 0


def test_incoming_traceparent_is_continued_over_http(
    spans: list[tracing.Span], serving: Serving
) -> None:
    trace, parent, header = traceparent()
    answer = httpx.post(
        f"{serving.url}/v2/models/hooks/infer",
        json={"inputs": [1]},
        headers={"traceparent": header},
    )
    assert answer.status_code == 200
    server = one(ended(spans, INFER), INFER)
    assert f"{server.trace_id:032x}" == trace
    assert server.remote_parent and f"{server.parent_id:016x}" == parent


def test_incoming_traceparent_is_continued_over_grpc() -> None:
    """In a process of its own: the in-process gRPC face loads mlserve's generated
    messages, which cannot share a descriptor pool with tritonclient's."""
    checks = subprocess.run(
        [sys.executable, "-m", "tests.tracing.grpc_span_checks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checks.returncode == 0 and checks.stdout.strip().endswith("ok"), checks.stderr


def test_probes_and_metrics_make_no_span(spans: list[tracing.Span], serving: Serving) -> None:
    for path in (
        "/v2/health/live",
        "/v2/health/ready",
        "/v2/models/hooks/ready",
        "/v2/models/hooks/versions/1/ready",
        "/metrics",
        "/",
    ):
        assert httpx.get(serving.url + path).status_code < 500, path
    assert httpx.get(f"{serving.url}/v2/models/hooks").status_code == 200
    metadata = "GET /v2/models/{model}"  # ended after the probes' answers: none made a span
    assert sorted(span.name for span in ended(spans, metadata)) == [metadata, "route hooks"]


def test_a_batch_links_to_its_requests(spans: list[tracing.Span], serving: Serving) -> None:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}
    with ThreadPoolExecutor(3) as pool:
        answers = list(
            pool.map(
                lambda _: httpx.post(f"{serving.url}/v2/models/batched/infer", json=body),
                range(3),
            )
        )
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    finished = ended(spans, INFER, 3)
    batch = one(finished, "batch batched")
    assert batch.attributes["mlserve.batch.size"] == 3
    predicts = by_name(finished, "predict")
    assert len(predicts) == 3
    linked = {span_id for _, span_id in batch.links}
    assert linked == {span.span_id for span in predicts}
    assert len({span.trace_id for span in predicts}) == 3


def test_asgi_app_makes_the_same_server_span(spans: list[tracing.Span]) -> None:
    trace, _, header = traceparent()

    async def call() -> list[int]:
        transport = httpx.ASGITransport(app=create_app(router()))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            infer = await client.post(
                "/v2/models/hooks/infer",
                json={"id": "r-1", "inputs": [1]},
                headers={"traceparent": header},
            )
            live = await client.get("/v2/health/live")
            return [infer.status_code, live.status_code]

    assert asyncio.run(call()) == [200, 200]
    finished = tuple(spans)
    server = one(finished, INFER)
    assert f"{server.trace_id:032x}" == trace
    attributes = server.attributes
    assert attributes["http.response.status_code"] == 200
    assert attributes["mlserve.request.id"] == "r-1"
    assert parent_of(finished, one(finished, "route hooks")) is server
    assert len(finished) == 5  # server, route, the three hooks: none for the probe


def test_kafka_trigger_continues_the_message_trace_and_passes_it_on(
    spans: list[tracing.Span], kafka: ProcessService
) -> None:
    from mlserve.kafka import KafkaTrigger, TriggerOptions
    from tests.kafka import topics

    tag = uuid.uuid4().hex[:8]
    source, output, group = f"in-{tag}", f"out-{tag}", f"group-{tag}"
    trace, parent, header = traceparent()
    body = json.dumps({"model": "hooks", "inputs": [1]}).encode()
    topics.produce(kafka.url, source, [(b"k", body, [("traceparent", header.encode())])])
    trigger = KafkaTrigger(router(), TriggerOptions(source, kafka.url, group, output)).start()
    try:
        [result] = topics.read(kafka.url, output, 1)
    finally:
        trigger.stop()
    finished = tuple(spans)
    consumed = one(finished, f"{source} process")
    assert consumed.kind == "consumer"
    assert f"{consumed.trace_id:032x}" == trace
    assert consumed.remote_parent and f"{consumed.parent_id:016x}" == parent
    attributes = consumed.attributes
    assert attributes["messaging.system"] == "kafka"
    assert attributes["messaging.destination.name"] == source
    assert attributes["messaging.kafka.message.key"] == "k"
    published = one(finished, f"{output} publish")
    assert published.kind == "producer"
    assert parent_of(finished, published) is consumed
    assert parent_of(finished, one(finished, "route hooks")) is consumed
    headers = dict(result.headers())
    assert headers["traceparent"].decode() == f"00-{trace}-{published.span_id:016x}-01"


def test_nuclio_event_is_a_server_span(spans: list[tracing.Span]) -> None:
    import nuclio_sdk

    from mlserve.function import nuclio

    context = nuclio_sdk.Context(worker_id=0, trigger=nuclio_sdk.TriggerInfo("http", "http"))
    context.user_data.mlserve_server = router()
    trace, parent, header = traceparent()
    event = nuclio_sdk.Event(
        body=json.dumps({"inputs": [1]}).encode(),
        content_type="application/json",
        path="/v2/models/hooks/infer",
        method="POST",
        trigger=nuclio_sdk.TriggerInfo("http", "my-http"),
        headers={"Content-Type": "application/json", "traceparent": header},
    )
    assert nuclio.handler(context, event).status_code == 200
    finished = tuple(spans)
    server = one(finished, "nuclio http")
    assert server.kind == "server"
    assert f"{server.trace_id:032x}" == trace
    assert server.attributes["http.response.status_code"] == 200
    assert parent_of(finished, one(finished, "route hooks")) is server


def test_remote_model_call_is_a_client_span_the_remote_continues(
    spans: list[tracing.Span], serving: Serving
) -> None:
    fn = mlserve.new_function("near")
    url = f"{serving.url}/v2/models/hooks"
    fn.add_model("far", model_url=url)
    near = fn.to_mock_server()
    assert near.test("/v2/models/far/infer", {"inputs": [3]}, trace=True)["outputs"] == [6]
    finished = ended(spans, INFER)
    root = one(finished, "test /v2/models/far/infer")
    client = one(finished, f"remote {url}")
    assert client.kind == "client"
    assert parent_of(finished, client).name == "route far"
    assert parent_of(finished, parent_of(finished, client)) is root
    remote = one(finished, INFER)
    assert parent_of(finished, remote) is client
    assert parent_of(finished, one(finished, "predict")).name == "route hooks"


def test_flow_steps_are_children_of_the_test_span(spans: list[tracing.Span]) -> None:
    fn = mlserve.new_function("flow")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="double", handler=double).to(name="plus", handler=plus_one).respond()
    server = fn.to_mock_server()
    trace, parent, header = traceparent()
    assert server.test("/", {"x": 2}, headers={"traceparent": header}, trace=True) == {"x": 5}
    finished = tuple(spans)
    root = one(finished, "test /")
    assert f"{root.trace_id:032x}" == trace
    assert root.remote_parent and f"{root.parent_id:016x}" == parent
    for name in ("step double", "step plus"):
        assert parent_of(finished, one(finished, name)) is root
    server.test("/", {"x": 2})  # not asked: no span, and none of its steps
    assert len(spans) == 3


@pytest.mark.parametrize("executor_type", ["thread", "array"])
def test_each_route_of_an_ensemble_is_a_span_with_its_hooks(
    spans: list[tracing.Span], executor_type: str
) -> None:
    fn = mlserve.new_function("ensemble")
    graph = fn.set_topology(
        "router", "mlserve.ParallelRun", name="both", executor_type=executor_type
    )
    graph.add_route("a", class_name=Hooks, model_path=".")
    graph.add_route("b", class_name=Hooks, model_path=".")
    server = fn.to_mock_server()
    server.test("/", {"inputs": [1, 2]}, trace=True)
    finished = tuple(spans)
    root = one(finished, "test /")
    for key in ("a", "b"):
        route = one(finished, f"route {key}")
        assert parent_of(finished, route) is root
        assert route.attributes == {"mlserve.step": key}
        hooks = [span for span in finished if span.parent_id == route.span_id]
        assert sorted(span.name for span in hooks) == ["postprocess", "predict", "preprocess"]
    assert {span.trace_id for span in finished} == {root.trace_id}


def test_storey_flow_steps_are_children_of_the_request(spans: list[tracing.Span]) -> None:
    fn = mlserve.new_function("flow")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="double", handler=double).to(name="plus", handler=plus_one).respond()
    server = fn.to_mock_server()
    try:
        assert server.test("/", {"x": 2}, trace=True) == {"x": 5}
    finally:
        server.wait_for_completion()
    finished = tuple(spans)
    root = one(finished, "test /")
    for name in ("step double", "step plus"):
        assert parent_of(finished, one(finished, name)) is root


@pytest.mark.parametrize("stream", ["file", "dummy"], ids=["lines", "calls"])
def test_model_log_record_carries_the_trace_id(
    spans: list[tracing.Span], stream: str, tmp_path: Path
) -> None:
    """Encoded on the request's thread (a file's lines) or on the sender's (a target of
    records): either way the record names the call's trace."""
    url = str(tmp_path / "log.jsonl") if stream == "file" else f"dummy://{uuid.uuid4().hex}"
    target = open_stream(url)
    pusher = StreamPusher(target)
    server = router()
    server.graph.routes["hooks"].object.model_logger = pusher  # type: ignore[union-attr]
    server.test("/v2/models/hooks/infer", {"inputs": [1]}, trace=True)
    server.test("/v2/models/hooks/infer", {"inputs": [1, 2, 3]}, silent=True, trace=True)
    pusher.close()
    if stream == "file":
        records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    else:
        records = list(target.records)  # type: ignore[attr-defined]
    roots = by_name(tuple(spans), "test /v2/models/hooks/infer")
    assert [record["trace_id"] for record in records] == [f"{root.trace_id:032x}" for root in roots]


def test_untraced_record_has_no_trace_id(tmp_path: Path) -> None:
    pusher = StreamPusher(open_stream(str(tmp_path / "log.jsonl")))
    server = router()
    server.graph.routes["hooks"].object.model_logger = pusher  # type: ignore[union-attr]
    server.test("/v2/models/hooks/infer", {"inputs": [1]}, trace=True)  # tracing is off
    pusher.close()
    [record] = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert "trace_id" not in record


def test_monitor_window_keeps_its_first_trace_ids() -> None:
    windows = PartitionWindows(0, 60.0, 5.0, lambda record: "uid", lambda value, at: at)
    traces = [uuid.uuid4().hex for _ in range(MAX_TRACE_IDS + 5)]
    for at, trace in enumerate(traces):
        record = {"when": "2026-01-01T00:00:01+00:00", "microsec": 5, "trace_id": trace}
        windows.add(json.dumps(record).encode(), at)
    windows.add(json.dumps({"when": "2026-01-01T00:00:02+00:00"}).encode(), 99)  # untraced
    [closed] = windows.close(windows.boundary + 3600 * 24 * 365 * 100)
    summary = closed.summary()
    assert summary["trace_ids"] == traces[:MAX_TRACE_IDS]
    assert summary["requests"] == MAX_TRACE_IDS + 6


def test_drift_alert_names_its_window_traces() -> None:
    from mlserve.monitoring.alerts import drift_alert
    from mlserve.monitoring.endpoints import EndpointMetadata, EndpointSpec, ModelEndpoint

    endpoint = ModelEndpoint(
        metadata=EndpointMetadata(project="project", uid="uid"),
        spec=EndpointSpec(function_uri="project/fn", model="model:latest"),
    )
    summary = {"drift_measures": {}, "window": {"requests": 1, "trace_ids": ["a" * 32]}}
    alert = drift_alert(endpoint, "NO_DRIFT", "DRIFT_DETECTED", summary)
    assert alert["trace_ids"] == ["a" * 32]


# A fresh process serves a router on the lean HTTP face, answers one call, and says
# whether tracing is on and whether anything of opentelemetry was imported.
OFF = """
import asyncio, sys, threading
import httpx, mlserve, uvloop
from mlserve.core import tracing
from mlserve.core.sockets import bind_socket
from mlserve.http.server import HTTPServer
from tests.services import free_port
from tests.tracing.fn import Hooks

fn = mlserve.new_function("off")
fn.add_model("hooks", class_name=Hooks, model_path=".")
http, port, loop = HTTPServer(fn.to_mock_server()), free_port(), uvloop.new_event_loop()
threading.Thread(target=loop.run_forever, daemon=True).start()
asyncio.run_coroutine_threadsafe(http.start(bind_socket("127.0.0.1", port)), loop).result(30)
answer = httpx.post(f"http://127.0.0.1:{port}/v2/models/hooks/infer", json={"inputs": [1]})
asyncio.run_coroutine_threadsafe(http.shutdown(), loop).result(30)
print(answer.status_code, tracing.on, any(m.startswith("opentelemetry") for m in sys.modules))
"""


def test_off_imports_no_opentelemetry() -> None:
    """Without an endpoint a server answers with nothing of opentelemetry loaded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", OFF], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "False", "False"]
