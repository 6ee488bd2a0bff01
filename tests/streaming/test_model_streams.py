"""Streaming models (docs/models.md#streaming-models): a generator ``predict`` answers in
chunks through the mock server (``GraphServer.test``) and ``run_async``; the stream's
manners: backpressure, cancellation, limits, errors, the gate, records and metrics."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from storey.dtypes import StreamingError

import mlserve
from mlserve import Event, V2ModelServer
from mlserve.core.aio import BackgroundLoop
from mlserve.core.limits import RequestTimeout, ServerLimits
from mlserve.core.streams import ChunkStream
from mlserve.server.graph_server import GraphServer, ServingRequestError
from tests.fixtures import Multiplier, RecordingLogger, serve

WAIT = 10.0  # seconds a gate may take to open before the test fails (never a timing assert)
_LOOP = BackgroundLoop()  # where the tests that read a stream themselves run their coroutines


class Words(V2ModelServer):
    """A generator: one chunk per input."""

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        for word in request["inputs"]:
            yield str(word).upper()


class AsyncWords(V2ModelServer):
    """An async generator: one chunk per input."""

    async def predict(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        for word in request["inputs"]:
            await asyncio.sleep(0)
            yield str(word).upper()


class Returned(V2ModelServer):
    """``predict`` returns a generator it makes otherwise: ``is_streaming`` says it streams."""

    def is_streaming(self) -> bool:
        return True

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        return iter([[n] for n in request["inputs"]])


class Gated(V2ModelServer):
    """Yields its first chunk, then waits for the test to open ``release``; notes its end."""

    def load(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Event()
        self.closed = threading.Event()

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        try:
            yield "first"
            if not self.release.wait(WAIT):
                raise AssertionError("the test never released the model")
            yield "second"
            self.finished.set()
        finally:
            self.closed.set()


class AsyncGated(Gated):
    async def predict(self, request: dict[str, Any]) -> AsyncIterator[Any]:  # type: ignore[override]
        try:
            yield "first"
            while not self.release.is_set():
                await asyncio.sleep(0.01)
            yield "second"
            self.finished.set()
        finally:
            self.closed.set()


class Endless(V2ModelServer):
    """Chunks without end (sync), counted as they are made; notes when it is closed."""

    def load(self) -> None:
        self.made = 0
        self.closed = threading.Event()

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        try:
            for n in range(int(request["inputs"][0])):
                self.made += 1
                yield n
        finally:
            self.closed.set()


class AsyncEndless(Endless):
    async def predict(self, request: dict[str, Any]) -> AsyncIterator[Any]:  # type: ignore[override]
        try:
            while True:
                await asyncio.sleep(0.01)
                yield 1
        finally:
            self.closed.set()


class Stalls(V2ModelServer):
    """One chunk, then nothing until released (a sync generator stuck in its step)."""

    def load(self) -> None:
        self.release = threading.Event()
        self.closed = threading.Event()

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        try:
            yield 1
            self.release.wait(WAIT)
            yield 2
        finally:
            self.closed.set()


class MidStream(V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        yield 1
        yield 2
        raise ValueError("Generator error mid-stream")


class Early(V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        raise ValueError("no chunk at all")
        yield  # a generator


class Tensors(V2ModelServer):
    """Two chunks of a two-output tensor answer."""

    def predict(self, request: Any) -> Iterator[Any]:
        yield {"a": [[1, 2]], "b": ["x"]}
        yield {"a": [[3, 4], [5, 6]], "b": ["y"]}


def _model(server: GraphServer, key: str) -> Any:
    return server.graph.routes[key].object  # type: ignore[union-attr]


def _outputs(chunks: Any) -> list[Any]:
    return [chunk["outputs"] for chunk in chunks]


# ---- what streams, and how it reads ----


@pytest.mark.parametrize("cls", [Words, AsyncWords])
def test_a_generator_predict_streams_its_chunks(cls: type[V2ModelServer]) -> None:
    server = serve({"w": cls})
    chunks = server.test("/v2/models/w/infer_stream", body={"id": "r1", "inputs": ["a", "b"]})
    assert isinstance(chunks, Iterator)
    chunks = list(chunks)
    assert _outputs(chunks) == ["A", "B"]
    assert {chunk["id"] for chunk in chunks} == {"r1"}
    assert {chunk["model_name"] for chunk in chunks} == {"w"}
    assert _model(server, "w").is_streaming()


def test_a_returned_generator_streams_when_is_streaming_says_so() -> None:
    server = serve({"r": Returned})
    chunks = server.test("/v2/models/r/infer_stream", body={"inputs": [1, 2, 3]})
    assert _outputs(chunks) == [[1], [2], [3]]


def test_a_versioned_model_streams_on_its_versioned_route() -> None:
    server = serve({"w:v2": Words})
    chunks = list(server.test("/v2/models/w/versions/v2/infer_stream", body={"inputs": ["x"]}))
    assert chunks[0]["model_version"] == "v2" and chunks[0]["outputs"] == "X"


def test_a_model_that_does_not_stream_answers_infer_stream_with_one_chunk() -> None:
    server = serve({"m": Multiplier})
    chunks = list(server.test("/v2/models/m/infer_stream", body={"inputs": [1, 2]}))
    assert len(chunks) == 1
    assert (
        chunks[0]["outputs"]
        == server.test("/v2/models/m/infer", body={"inputs": [1, 2]})["outputs"]
    )


@pytest.mark.parametrize("cls", [Words, AsyncWords])
def test_infer_on_a_streaming_model_gathers_the_chunks(cls: type[V2ModelServer]) -> None:
    server = serve({"w": cls})
    answer = server.test("/v2/models/w/infer", body={"id": "r2", "inputs": ["a", "b", "c"]})
    assert answer["outputs"] == ["A", "B", "C"] and answer["id"] == "r2"
    assert server.test("/v2/models/w/predict", body={"inputs": ["d"]})["outputs"] == ["D"]


def test_tensor_chunks_are_joined_along_the_first_axis() -> None:
    server = serve({"t": Tensors})
    request = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [0]}]}
    chunks = list(server.test("/v2/models/t/infer_stream", body=request))
    assert [o["shape"] for o in chunks[1]["outputs"]] == [[2, 2], [1]]
    answer = server.test("/v2/models/t/infer", body=request)
    joined = {o["name"]: o for o in answer["outputs"]}
    assert joined["a"]["shape"] == [3, 2] and joined["a"]["data"] == [1, 2, 3, 4, 5, 6]
    assert joined["b"]["shape"] == [2] and joined["b"]["data"] == ["x", "y"]


def test_the_sync_api_gathers_and_streams_too() -> None:
    """``do_event`` (mlrun's sync entry) answers a streaming model without the server."""
    model = Words(name="w", model=object())
    gathered = model.do_event(Event({"inputs": ["a", "b"]}, path="infer"))
    assert gathered.body["outputs"] == ["A", "B"]
    streamed = model.do_event(Event({"inputs": ["c"]}, path="infer_stream")).body
    assert isinstance(streamed, ChunkStream)

    async def read() -> list[Any]:
        return [chunk async for chunk in streamed]

    assert _outputs(asyncio.run(read())) == ["C"]


def test_a_streaming_model_with_batching_does_not_load() -> None:
    server = serve({"w": (Words, {"max_batch_size": 4})})
    model = _model(server, "w")
    assert not model.ready
    assert "cannot be batched" in model.error
    with pytest.raises(ServingRequestError) as refused:
        server.test("/v2/models/w/infer_stream", body={"inputs": ["a"]})
    assert refused.value.status_code == 503


def test_a_streaming_graph_is_never_driven_inline() -> None:
    assert not serve({"w": Words}).runs_inline(Event({"inputs": []}, path="/v2/models/w/infer"))
    assert serve({"m": Multiplier}).runs_inline(Event({"inputs": []}, path="/v2/models/m/infer"))


# ---- chunk by chunk ----


@pytest.mark.parametrize("cls", [Gated, AsyncGated])
def test_the_first_chunk_arrives_before_the_model_finishes(cls: type[Gated]) -> None:
    server = serve({"g": cls})
    model = _model(server, "g")
    chunks = server.test("/v2/models/g/infer_stream", body={"inputs": [0]})
    assert next(chunks)["outputs"] == "first"
    assert not model.finished.is_set()  # the model still waits for the release
    model.release.set()
    assert _outputs(chunks) == ["second"]
    assert model.finished.is_set() and model.closed.wait(WAIT)


@pytest.mark.parametrize("cls", [Gated, AsyncGated])
def test_leaving_a_stream_early_runs_the_generators_finally(cls: type[Gated]) -> None:
    server = serve({"g": cls})
    model = _model(server, "g")
    chunks = server.test("/v2/models/g/infer_stream", body={"inputs": [0]})
    assert next(chunks)["outputs"] == "first"
    chunks.close()  # the reader goes away
    model.release.set()  # a sync generator stuck in its step ends it first
    assert model.closed.wait(WAIT)
    assert not model.finished.is_set()


def test_aclose_closes_an_endless_generator_where_it_runs() -> None:
    server = serve({"e": Endless, "a": AsyncEndless})

    async def open_and_close(key: str) -> None:
        response = await server.run_async(
            Event({"inputs": [10**9]}, path=f"/v2/models/{key}/infer_stream")
        )
        stream = response.body
        assert response.status_code == 200 and response.content_type == "text/event-stream"
        await stream.__anext__()
        await stream.aclose()
        await stream.aclose()  # idempotent
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()

    for key in ("e", "a"):
        _LOOP.run(open_and_close(key))
        assert _model(server, key).closed.wait(WAIT)


def test_a_reader_that_stops_reading_holds_the_producer_to_the_queue() -> None:
    server = serve({"e": Endless})
    server.limits = ServerLimits(stream_queue=4)
    model = _model(server, "e")

    async def run() -> None:
        response = await server.run_async(
            Event({"inputs": [10_000]}, path="/v2/models/e/infer_stream")
        )
        stream = response.body
        # the first chunk came (prefetched); 4 more may wait in the queue, no more
        for _ in range(500):
            if model.made >= 5:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # room to overrun, were the queue unbounded
        assert model.made <= 5
        got = [chunk["outputs"] async for chunk in stream]
        assert got == list(range(10_000)) and stream.chunks == 10_000

    _LOOP.run(run())
    assert model.made == 10_000 and model.closed.wait(WAIT)


# ---- limits and errors ----


def test_no_chunk_within_the_chunk_timeout_ends_the_stream_with_504() -> None:
    server = serve({"s": Stalls})
    server.limits = ServerLimits(stream_chunk_timeout=0.2)
    model = _model(server, "s")

    async def run() -> None:
        response = await server.run_async(Event({"inputs": [0]}, path="/v2/models/s/infer_stream"))
        stream = response.body
        assert (await stream.__anext__())["outputs"] == 1
        with pytest.raises(RequestTimeout, match="no chunk came in 0.2 s") as late:
            await stream.__anext__()
        assert server.error_response(late.value).status_code == 504

    _LOOP.run(run())
    model.release.set()  # the generator's step ends, then it is closed
    assert model.closed.wait(WAIT)


def test_a_stream_past_the_stream_timeout_ends_with_504_and_closes_the_generator() -> None:
    server = serve({"a": AsyncEndless})
    server.limits = ServerLimits(stream_timeout=0.3)
    chunks = server.test("/v2/models/a/infer_stream", body={"inputs": [0]})
    got = 0
    with pytest.raises(StreamingError, match="RequestTimeout: the stream took longer than 0.3 s"):
        for _ in chunks:
            got += 1
    assert got >= 1
    assert _model(server, "a").closed.wait(WAIT)


def test_an_error_mid_stream_reaches_the_caller_after_the_chunks_before_it() -> None:
    server = serve({"m": MidStream})
    got = []
    with pytest.raises(StreamingError, match="Generator error mid-stream"):
        for chunk in server.test("/v2/models/m/infer_stream", body={"inputs": [0]}):
            got.append(chunk["outputs"])
    assert got == [1, 2]
    failed = server.test("/v2/models/m/infer", body={"inputs": [0]}, silent=True)
    assert failed.status_code == 500 and "Generator error mid-stream" in failed.body["error"]


def test_hide_errors_holds_mid_stream() -> None:
    server = serve({"m": MidStream})
    server.hide_errors = True
    with pytest.raises(StreamingError) as hidden:
        list(server.test("/v2/models/m/infer_stream", body={"inputs": [0]}))
    assert "Generator error" not in str(hidden.value) and "error id" in str(hidden.value)


def test_an_error_before_the_first_chunk_is_an_ordinary_error() -> None:
    server = serve({"e": Early, "w": Words})
    with pytest.raises(ServingRequestError) as failed:
        server.test("/v2/models/e/infer_stream", body={"inputs": [0]})
    assert failed.value.status_code == 500 and "no chunk at all" in str(failed.value)
    with pytest.raises(ServingRequestError) as bad:
        server.test("/v2/models/w/infer_stream", body={"no": "inputs"})
    assert bad.value.status_code == 400


def test_infer_stream_answers_post_only() -> None:
    server = serve({"w": Words})
    refused = server.test("/v2/models/w/infer_stream", method="GET", silent=True)
    assert refused.status_code == 405 and refused.headers["Allow"] == "POST"


def test_an_open_stream_takes_the_models_only_call() -> None:
    server = serve({"g": Gated})
    server.limits = ServerLimits(model_concurrency=1, model_queue=0)
    model = _model(server, "g")
    chunks = server.test("/v2/models/g/infer_stream", body={"inputs": [0]})
    assert next(chunks)["outputs"] == "first"
    busy = server.test("/v2/models/g/infer_stream", body={"inputs": [0]}, silent=True)
    assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
    model.release.set()
    assert _outputs(chunks) == ["second"]
    again = server.test("/v2/models/g/infer", body={"inputs": [0]})  # the slot was freed
    assert again["outputs"] == ["first", "second"]


# ---- records and metrics ----


def test_each_stream_gives_one_record_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fn = mlserve.new_function("records")
    fn.add_model("w", class_name=Words, model=object())
    fn.add_model("m", class_name=MidStream, model=object())
    fn.add_model("e", class_name=Endless)
    fn.set_tracking()
    server = fn.to_mock_server()
    assert _outputs(server.test("/v2/models/w/infer_stream", body={"inputs": ["a", "b"]})) == [
        "A",
        "B",
    ]
    with pytest.raises(StreamingError):
        list(server.test("/v2/models/m/infer_stream", body={"inputs": [0]}))
    endless = server.test("/v2/models/e/infer_stream", body={"inputs": [10**9]})
    next(endless)
    endless.close()
    server.wait_for_completion()
    lines = (tmp_path / "mlserve-data" / "model-logs.jsonl").read_text().splitlines()
    records = {record["model"]: record for record in map(json.loads, lines)}
    assert len(lines) == 3
    ok, failed, cancelled = records["w"], records["m"], records["e"]
    assert ok["op"] == "infer_stream" and ok["chunks"] == 2
    assert ok["resp"]["outputs"] == ["A", "B"] and ok["request"]["inputs"] == ["a", "b"]
    assert 0 <= ok["first_chunk_microsec"] <= ok["microsec"]
    assert "error" not in ok and "cancelled" not in ok
    assert failed["chunks"] == 2 and failed["resp"]["outputs"] == [1, 2]
    assert failed["error"] == "Generator error mid-stream"
    assert cancelled["cancelled"] is True and cancelled["chunks"] >= 1


def test_stream_metrics_are_on_the_metrics_page() -> None:
    server = serve({"words_metrics": Words})
    list(server.test("/v2/models/words_metrics/infer_stream", body={"inputs": ["a", "b", "c"]}))
    page = server.test("/metrics", get_body=False).body.decode()
    labels = '{model="words_metrics",version=""}'
    assert f"mlserve_model_stream_chunks_total{labels} 3.0" in page
    assert f"mlserve_model_stream_first_chunk_seconds_count{labels} 1.0" in page
    assert (
        'mlserve_model_requests_total{model="words_metrics",operation="infer_stream",version=""}'
        in page
    )


# ---- the stream itself ----


def test_map_applies_to_each_chunk_and_closing_it_closes_the_source() -> None:
    closed = threading.Event()

    def numbers() -> Iterator[int]:
        try:
            yield from range(100)
        finally:
            closed.set()

    async def run() -> None:
        doubled = ChunkStream(numbers()).map(lambda n: n * 2)
        assert [await doubled.__anext__() for _ in range(3)] == [0, 2, 4]
        assert doubled.chunks == 3
        await doubled.aclose()

    asyncio.run(run())
    assert closed.wait(WAIT)


def test_a_generators_own_timeout_error_is_its_error_not_a_timeout() -> None:
    def mine() -> Iterator[int]:
        yield 1
        raise TimeoutError("the model's own")

    async def run() -> None:
        stream = ChunkStream(mine(), chunk_timeout=30)
        assert await stream.__anext__() == 1
        with pytest.raises(TimeoutError, match="the model's own") as raised:
            await stream.__anext__()
        assert not isinstance(raised.value, RequestTimeout)

    asyncio.run(run())


def test_a_stream_dropped_unread_frees_the_models_slot() -> None:
    server = serve({"g": Gated})
    server.limits = ServerLimits(model_concurrency=1, model_queue=0)
    model = _model(server, "g")

    async def open_and_drop() -> None:
        await server.run_async(Event({"inputs": [0]}, path="/v2/models/g/infer_stream"))

    _LOOP.run(open_and_drop())  # the stream (its first chunk read ahead) is dropped
    model.release.set()
    assert model.closed.wait(WAIT)
    for _ in range(500):  # the drop is seen on the loop, soon
        answer = server.test("/v2/models/g/infer", body={"inputs": [0]}, silent=True)
        if not isinstance(answer, mlserve.Response):
            break
        assert answer.status_code == 429
        threading.Event().wait(0.01)
    assert answer["outputs"] == ["first", "second"]


def test_a_model_logger_of_its_own_gets_a_stream_as_a_call() -> None:
    server = serve({"w": Words, "m": MidStream})
    loggers = {key: RecordingLogger() for key in ("w", "m")}
    for key, recording in loggers.items():
        _model(server, key).model_logger = recording
    list(server.test("/v2/models/w/infer_stream", body={"inputs": ["a"]}))
    with pytest.raises(StreamingError):
        list(server.test("/v2/models/m/infer_stream", body={"inputs": [0]}))
    (record,) = loggers["w"].records
    assert record["op"] == "infer_stream" and record["response"]["outputs"] == ["A"]
    (error,) = loggers["m"].errors
    assert str(error["error"]) == "Generator error mid-stream"


def test_run_and_an_encoded_answer_get_the_chunks_gathered_in_a_list() -> None:
    server = serve({"w": Words, "m": MidStream})
    body = server.run(
        Event({"inputs": ["a", "b"]}, path="/v2/models/w/infer_stream"), get_body=True
    )
    assert _outputs(body) == ["A", "B"]
    encoded = server.test("/v2/models/w/infer_stream", body={"inputs": ["c"]}, get_body=False)
    assert encoded.content_type == "application/json"
    assert _outputs(json.loads(encoded.body)) == ["C"]
    failed = server.run(Event({"inputs": [0]}, path="/v2/models/m/infer_stream"))
    assert failed.status_code == 500 and b"Generator error mid-stream" in failed.body


def test_closing_a_stream_ends_a_read_waiting_on_it() -> None:
    release, closed = threading.Event(), threading.Event()

    def stuck() -> Iterator[int]:
        try:
            yield 1
            release.wait(WAIT)
            yield 2
        finally:
            closed.set()

    async def run() -> None:
        stream = ChunkStream(stuck())
        assert await stream.__anext__() == 1
        reading = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)  # the read waits for a chunk that does not come
        await stream.aclose()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(reading, WAIT)

    asyncio.run(run())
    release.set()
    assert closed.wait(WAIT)
