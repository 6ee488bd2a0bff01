"""Streaming steps in flows (docs/graphs.md#streaming-steps), on both engines, and
mlrun's streaming names (docs/migrating-from-mlrun.md#streaming): ``set_streaming``,
``spec.streaming``, trigger checks, the nuclio streaming handlers and ``Model``."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import nuclio_sdk
import pytest
import yaml
from storey.dtypes import StreamingError

import mlserve
from mlserve import Collector, Model
from mlserve.core.limits import ServerLimits
from mlserve.runtimes.nuclio import (
    nuclio_init_hook,
    serving_subkind,
    v2_serving_handler,
    v2_serving_streaming_handler,
)
from mlserve.server.graph_server import GraphServer, ServingRequestError
from tests.netserver import start_server

ENGINES = ["sync", "async"]
WAIT = 10.0  # seconds a gate may take to open before the test fails (never a timing assert)


class Chunks:
    """Yields ``<body>_chunk_<i>``; records that its generator was closed."""

    closed: list[str] = []

    def __init__(self, context: object = None, name: str | None = None, n: int = 3) -> None:
        self.n = n
        self.name = name

    def do(self, body: Any) -> Iterator[str]:
        try:
            for i in range(self.n):
                yield f"{body}_chunk_{i}"
        finally:
            Chunks.closed.append(str(self.name))


class AsyncChunks:
    async def do(self, body: Any) -> AsyncIterator[str]:
        for i in range(3):
            await asyncio.sleep(0)
            yield f"{body}_async_{i}"


class Again:
    """Streams the items of a list (what a collector sends on)."""

    def do(self, body: list[str]) -> Iterator[str]:
        for item in body:
            yield f"re_{item}"


class Broken:
    def do(self, body: Any) -> Iterator[str]:
        yield f"{body}_chunk_0"
        raise ValueError("Generator error mid-stream")


class FailsSecond:
    """Fails on the second chunk it sees."""

    def __init__(self) -> None:
        self.seen = 0

    def do(self, body: str) -> str:
        self.seen += 1
        if self.seen == 2:
            raise RuntimeError(f"Failed on chunk {self.seen - 1}")
        return body


class Gated:
    """One chunk, then waits for the test's gate before the last one."""

    gate = threading.Event()
    finished = threading.Event()

    def do(self, body: Any) -> Iterator[str]:
        yield "first"
        Gated.gate.wait(WAIT)
        yield "last"
        Gated.finished.set()


class Endless:
    """Counts the chunks it makes, up to 10 000."""

    made = 0

    def do(self, body: Any) -> Iterator[int]:
        for i in range(10_000):
            Endless.made = i + 1
            yield i


class Stalls:
    """One chunk, then waits for the test's release."""

    release = threading.Event()

    def do(self, body: Any) -> Iterator[int]:
        yield 1
        Stalls.release.wait(WAIT)
        yield 2


def upper(body: str) -> str:
    return body.upper()


class Tokens(Model):
    def predict(self, body: Any, **kwargs: Any) -> Iterator[str]:
        yield from str(body).split()


class AsyncTokens(Model):
    async def predict_async(self, body: Any, **kwargs: Any) -> AsyncIterator[str]:
        for word in str(body).split():
            yield word


class Doubler(Model):
    def predict(self, body: Any, **kwargs: Any) -> Any:
        return body * 2


NAMESPACE = {
    name: value for name, value in globals().items() if isinstance(value, type) or name == "upper"
}


def _server(engine: str, *steps: tuple[str, Any] | tuple[str, Any, dict[str, Any]]) -> GraphServer:
    """A flow of ``steps`` (name, class or handler[, class args]) in a row; the last responds."""
    fn = mlserve.new_function("streams")
    graph = fn.set_topology("flow", engine=engine)
    previous = None
    for name, what, *args in steps:
        kind = {"handler": what} if isinstance(what, str) and what.islower() else {}
        cls = None if kind else what
        step = graph.add_step(cls, name=name, after=previous, **kind, **(args[0] if args else {}))
        previous = name
    step.respond()
    return fn.to_mock_server(namespace=NAMESPACE)


@pytest.fixture
def servers() -> Iterator[list[GraphServer]]:
    made: list[GraphServer] = []
    yield made
    for server in made:
        server.wait_for_completion()


@pytest.fixture(params=ENGINES)
def flow(request: pytest.FixtureRequest, servers: list[GraphServer]) -> Any:
    """``flow(*steps)``: a mock server of the steps on the engine of this run."""

    def make(*steps: Any) -> GraphServer:
        server = _server(request.param, *steps)
        servers.append(server)
        return server

    return make


def test_collector_gathers_the_chunks(flow: Any) -> None:
    server = flow(("streamer", "Chunks"), ("collector", "storey.Collector"))
    assert server.test("/", body="test") == ["test_chunk_0", "test_chunk_1", "test_chunk_2"]


def test_mlserve_collector_and_an_async_generator(flow: Any) -> None:
    server = flow(("streamer", AsyncChunks), ("collector", Collector))
    assert server.test("/", body="x") == ["x_async_0", "x_async_1", "x_async_2"]


def test_steps_after_the_streamer_run_once_per_chunk(flow: Any) -> None:
    server = flow(("streamer", "Chunks"), ("up", "upper"), ("collector", "storey.Collector"))
    assert server.test("/", body="a") == ["A_CHUNK_0", "A_CHUNK_1", "A_CHUNK_2"]


def test_a_streaming_responder_answers_a_generator(flow: Any) -> None:
    server = flow(("streamer", "Chunks"), ("up", "upper"))
    answer = server.test("/", body="a")
    assert inspect.isgenerator(answer)
    assert list(answer) == ["A_CHUNK_0", "A_CHUNK_1", "A_CHUNK_2"]


def test_an_empty_stream_gathers_to_an_empty_list(flow: Any) -> None:
    server = flow(("streamer", "Chunks", {"n": 0}), ("collector", "storey.Collector"))
    assert server.test("/", body="a") == []


def test_streaming_on_streaming_names_both_steps(flow: Any) -> None:
    server = flow(("one", "Chunks"), ("two", "Again"))
    with pytest.raises(ServingRequestError) as raised:
        server.test("/", body="a")
    assert "Streaming on top of streaming is not allowed. Step 'two' received a streaming " in str(
        raised.value
    )
    assert "from 'one'" in str(raised.value)


def test_streaming_after_a_collector_is_allowed(flow: Any) -> None:
    server = flow(
        ("one", "Chunks", {"n": 2}),
        ("gather", "storey.Collector"),
        ("again", "Again"),
        ("gather2", "storey.Collector"),
    )
    assert server.test("/", body="t") == ["re_t_chunk_0", "re_t_chunk_1"]


def test_an_error_mid_stream_is_the_collectors_answer(flow: Any) -> None:
    server = flow(("streamer", "Broken"), ("collector", "storey.Collector"))
    assert server.test("/", body="t") == {"error": "ValueError: Generator error mid-stream"}


def test_an_error_mid_stream_reaches_the_reader_after_the_chunks_before_it(flow: Any) -> None:
    server = flow(("streamer", "Broken"))
    answer = server.test("/", body="t")
    chunks = []
    with pytest.raises(StreamingError, match="ValueError: Generator error mid-stream"):
        for chunk in answer:
            chunks.append(chunk)
    assert chunks == ["t_chunk_0"]


def test_a_step_failing_on_a_chunk_fails_the_request(flow: Any) -> None:
    server = flow(("streamer", "Chunks"), ("fails", "FailsSecond"), ("collector", Collector))
    with pytest.raises(ServingRequestError, match="RuntimeError: Failed on chunk 1"):
        server.test("/", body="t")


def test_the_first_chunk_leaves_before_the_generator_ends(flow: Any) -> None:
    Gated.gate.clear()
    Gated.finished.clear()
    server = flow(("streamer", "Gated"))
    answer = server.test("/", body="t")
    try:
        assert next(answer) == "first"
        assert not Gated.finished.is_set()  # the generator still waits on the gate
    finally:
        Gated.gate.set()
    assert list(answer) == ["last"]
    assert Gated.finished.wait(WAIT)


def test_a_reader_that_leaves_closes_the_generator(flow: Any) -> None:
    Chunks.closed.clear()
    server = flow(("leaving", "Chunks", {"n": 1000}))
    answer = server.test("/", body="t")
    assert next(answer) == "t_chunk_0"
    answer.close()
    for _ in range(int(WAIT * 100)):  # the generator closes where it runs
        if "leaving" in Chunks.closed:
            break
        threading.Event().wait(0.01)
    assert "leaving" in Chunks.closed


def test_a_reader_that_stops_reading_holds_the_generator_back(flow: Any) -> None:
    Endless.made = 0
    server = flow(("endless", "Endless"))
    server.limits = ServerLimits(stream_queue=2)
    answer = server.test("/", body="e")
    assert next(answer) == 0
    threading.Event().wait(0.3)  # room to overrun, were the queues unbounded
    assert Endless.made <= 10
    assert sum(1 for _ in answer) == 9_999
    assert Endless.made == 10_000


def test_no_chunk_within_the_chunk_timeout_ends_the_stream(flow: Any) -> None:
    Stalls.release.clear()
    server = flow(("stalls", "Stalls"))
    server.limits = ServerLimits(stream_chunk_timeout=0.2)
    answer = server.test("/", body="s")
    try:
        assert next(answer) == 1
        with pytest.raises(StreamingError, match="RequestTimeout: no chunk came in 0.2 s"):
            next(answer)
    finally:
        Stalls.release.set()


def test_non_streaming_steps_pass_through_a_collector(flow: Any) -> None:
    server = flow(("up", "upper"), ("collector", "storey.Collector"))
    assert server.test("/", body="a") == "A"


def test_run_gathers_a_streamed_answer(flow: Any) -> None:
    server = flow(("streamer", "Chunks", {"n": 2}))
    assert server.run(mlserve.Event(body="r"), get_body=True) == ["r_chunk_0", "r_chunk_1"]


def test_collector_counts_the_streams_of_branches(servers: list[GraphServer]) -> None:
    fn = mlserve.new_function("branches")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="streamer", class_name="Chunks", n=2)
    graph.add_step(name="left", handler="upper", after="streamer")
    graph.add_step(name="right", handler="upper", after="streamer")
    graph.add_step(
        name="both", class_name=Collector, after=["left", "right"], expected_completions=2
    ).respond()
    server = fn.to_mock_server(namespace=NAMESPACE)
    servers.append(server)
    assert sorted(server.test("/", body="b")) == sorted(["B_CHUNK_0", "B_CHUNK_1"] * 2)


def test_collector_needs_one_completion_at_least() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Collector(expected_completions=0)


# ---- mlrun's Model ----------------------------------------------------------------------


def test_model_says_whether_it_streams() -> None:
    assert Tokens(name="t").is_streaming() is True
    assert AsyncTokens(name="t").is_streaming() is True
    assert Doubler(name="d").is_streaming() is False
    assert Model(name="m").predict({"a": 1}) == {"a": 1}


@pytest.mark.parametrize("model", [Tokens, AsyncTokens])
def test_a_streaming_model_step(flow: Any, model: type[Model]) -> None:
    server = flow(("model", model), ("collector", Collector))
    assert server.test("/", body="one two") == ["one", "two"]


def test_a_model_step_that_does_not_stream(flow: Any) -> None:
    assert flow(("model", Doubler)).test("/", body=21) == 42


# ---- the function: set_streaming, triggers, the spec, the export ----------------------


def test_streaming_is_none_until_set_and_travels_in_the_dict() -> None:
    fn = mlserve.new_function("s")
    assert fn.spec.streaming is None
    assert "streaming" not in fn.to_dict()["spec"]
    fn.set_topology("flow", engine="async")
    fn.set_streaming(enabled=True)
    assert mlserve.new_function(runtime=fn.to_dict()).spec.streaming is True
    fn.set_streaming(enabled=False)
    assert mlserve.new_function(runtime=fn.to_dict()).spec.streaming is False


def test_streaming_refuses_non_http_triggers() -> None:
    fn = mlserve.new_function("s")
    fn.add_trigger("web", {"kind": "http", "port": 8080})
    fn.add_trigger("queue", {"kind": "kafka", "url": "kafka://localhost"})
    with pytest.raises(ValueError, match="Streaming is only supported with HTTP triggers.*queue"):
        fn.set_streaming()
    assert fn.spec.streaming is None

    fn = mlserve.new_function("s")
    fn.set_streaming(enabled=True)
    fn.add_trigger("web", {"kind": "http"})
    with pytest.raises(ValueError, match="Cannot add non-HTTP trigger 'queue'"):
        fn.add_trigger("queue", {"kind": "kafka"})
    assert list(fn.spec.config) == ["spec.triggers.web"]


def test_the_nuclio_export_streams_and_carries_the_triggers(tmp_path: Path) -> None:
    fn = mlserve.new_function("s")
    fn.set_topology("flow", engine="async").to(name="up", handler="str.upper").respond()
    fn.add_trigger("web", {"kind": "http", "maxWorkers": 2})
    plain = yaml.safe_load(Path(fn.export(str(tmp_path / "a.yaml"), format="nuclio")).read_text())
    assert plain["spec"]["handler"] == "mlserve_function:handler"
    assert plain["spec"]["triggers"]["web"] == {"kind": "http", "maxWorkers": 2}
    fn.set_streaming()
    streamed = yaml.safe_load(
        Path(fn.export(str(tmp_path / "b.yaml"), format="nuclio")).read_text()
    )
    assert streamed["spec"]["handler"] == "mlserve_function:streaming_handler"
    spec = json.loads(streamed["spec"]["env"][0]["value"])["spec"]
    assert spec["streaming"] is True


def test_new_function_needs_a_name_or_a_runtime() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        mlserve.new_function()


# ---- mlrun's nuclio handlers ------------------------------------------------------------


def _nuclio(monkeypatch: pytest.MonkeyPatch, streaming: bool) -> nuclio_sdk.Context:
    fn = mlserve.new_function("nuclio-streams")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="streamer", class_name="Chunks", n=2).to(name="up", handler="upper").respond()
    if streaming:
        fn.set_streaming()
    monkeypatch.setenv("SERVING_SPEC_ENV", json.dumps(fn.to_dict()))
    context = nuclio_sdk.Context(
        logger=nuclio_sdk.Logger(logging.DEBUG, name="test-flow-streams"),
        worker_id=0,
        trigger=nuclio_sdk.TriggerInfo("http", "http"),
    )
    nuclio_init_hook(context, NAMESPACE, serving_subkind)
    return context


def _event(body: Any) -> nuclio_sdk.Event:
    return nuclio_sdk.Event(
        body=json.dumps(body).encode(),
        content_type="application/json",
        path="/",
        method="POST",
        trigger=nuclio_sdk.TriggerInfo("http", "http"),
    )


def test_the_streaming_handler_yields_each_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    assert inspect.isasyncgenfunction(v2_serving_streaming_handler)
    assert not inspect.isgeneratorfunction(v2_serving_handler)
    context = _nuclio(monkeypatch, streaming=True)
    assert context.mlrun_handler is v2_serving_streaming_handler

    async def read() -> list[Any]:
        return [piece async for piece in context.mlrun_handler(context, _event("n"))]

    try:
        pieces = asyncio.run(read())
    finally:
        context._server.wait_for_completion()
    assert pieces == [b'data: "N_CHUNK_0"\n\n', b'data: "N_CHUNK_1"\n\n']


def test_the_plain_handler_gathers_the_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    context = _nuclio(monkeypatch, streaming=False)
    assert context.mlrun_handler is v2_serving_handler
    try:
        response = context.mlrun_handler(context, _event("n"))
    finally:
        context._server.wait_for_completion()
    assert response.status_code == 200
    assert json.loads(response.body) == ["N_CHUNK_0", "N_CHUNK_1"]


# ---- over HTTP: a real server ----------------------------------------------------------


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, f"the step never wrote {path.name}"
        time.sleep(0.02)


def test_http_sends_each_chunk_of_a_flow_as_it_comes(tmp_path: Path) -> None:
    env = {"MLSERVE_FLOW_TEST_DIR": str(tmp_path)}
    process = start_server(target="tests/streaming/flow_fn.py", env=env)
    try:
        with httpx.stream("POST", process.url + "/", json="go", timeout=30) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert next(lines) == 'data: "FIRST"'  # before the step may go on
            assert not (tmp_path / "finally").exists()
            (tmp_path / "release").write_text("")
            assert [line for line in lines if line] == ['data: "SECOND"']
        _wait_for(tmp_path / "finally")
    finally:
        process.stop()
