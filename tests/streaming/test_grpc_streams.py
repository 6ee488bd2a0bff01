"""Streams over gRPC, read by tritonclient from a real server: Triton's decoupled
``ModelStreamInfer`` (one response per chunk, the final flag, the empty final response),
errors mid-stream, cancellation and authentication (docs/serving.md#streams-over-grpc)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.netserver import ServerProcess, start_server

grpcclient = pytest.importorskip("tritonclient.grpc")
InferenceServerException = grpcclient.InferenceServerException

TOKEN = "stream-secret"
HEADERS = {"authorization": f"Bearer {TOKEN}"}
FN = "tests/streaming/grpc_fn.py"
_tags = itertools.count(1)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the models' gates and markers are (``STREAM_TEST_DIR``)."""
    return tmp_path_factory.mktemp("stream-files")


@pytest.fixture(scope="module")
def server(files: Path) -> Iterator[ServerProcess]:
    env = {"STREAM_TEST_DIR": str(files), "MLSERVE_AUTH_TOKEN": TOKEN}
    process = start_server(target=FN, env=env)
    yield process
    process.stop()


@pytest.fixture()
def client(server: ServerProcess) -> Iterator[Any]:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    yield client
    client.close()


Answers = queue.Queue[tuple[Any, Any]]


def _inputs(count: int, tag: int = 0) -> list[Any]:
    tensor = grpcclient.InferInput("n", [2], "INT64")
    tensor.set_data_from_numpy(np.array([count, tag], dtype=np.int64))
    return [tensor]


def _open(client: Any, headers: dict[str, str] | None = HEADERS) -> Answers:
    answers: Answers = queue.Queue()
    client.start_stream(
        callback=lambda result, error: answers.put((result, error)), headers=headers
    )
    return answers


def _take(answers: Answers, count: int) -> list[tuple[Any, Any]]:
    return [answers.get(timeout=30) for _ in range(count)]


def _final(result: Any) -> bool:
    """The response's ``triton_final_response`` parameter (it must be there)."""
    parameters = result.get_response().parameters
    assert "triton_final_response" in parameters
    return bool(parameters["triton_final_response"].bool_param)


def _token(result: Any) -> int:
    return int(result.as_numpy("token")[0])


@pytest.mark.parametrize("model", ["tokens", "async-tokens"])
def test_every_chunk_in_order_then_the_empty_final_response(client: Any, model: str) -> None:
    answers = _open(client)
    try:
        client.async_stream_infer(
            model, _inputs(5), request_id="r1", enable_empty_final_response=True
        )
        got = _take(answers, 6)
    finally:
        client.stop_stream()
    assert all(error is None for _, error in got)
    chunks, (last, _) = [result for result, _ in got[:5]], got[5]
    assert [_token(result) for result in chunks] == [0, 1, 2, 3, 4]
    assert [_final(result) for result in chunks] == [False] * 5
    assert all(r.get_response().id == "r1" and r.get_response().model_name == model for r in chunks)
    empty = last.get_response()
    assert _final(last) and not empty.outputs and not empty.raw_output_contents
    assert (empty.id, empty.model_name) == ("r1", model)


def test_requests_on_one_stream_are_answered_one_after_another(client: Any) -> None:
    """Without the ask, no empty final response; a model that does not stream answers
    once, final, as Triton answers for a model that is not decoupled."""
    answers = _open(client)
    try:
        client.async_stream_infer("tokens", _inputs(3), request_id="a")
        client.async_stream_infer("plain", _inputs(2), request_id="b")
        client.async_stream_infer(
            "plain", _inputs(1), request_id="c", enable_empty_final_response=True
        )
        client.async_stream_infer("async-tokens", _inputs(2), request_id="d")
        got = _take(answers, 7)
    finally:
        client.stop_stream()
    assert answers.empty()
    assert all(error is None for _, error in got)
    results = [result for result, _ in got]
    assert [r.get_response().id for r in results] == ["a", "a", "a", "b", "c", "d", "d"]
    assert [_final(r) for r in results] == [False, False, False, True, True, False, False]
    assert [_token(r) for r in results[:3]] == [0, 1, 2]
    np.testing.assert_array_equal(results[3].as_numpy("token"), [0, 1])


def test_the_first_chunk_arrives_while_the_model_still_waits(client: Any, files: Path) -> None:
    tag = next(_tags)
    answers = _open(client)
    try:
        client.async_stream_infer("tokens", _inputs(2, tag), enable_empty_final_response=True)
        first, error = answers.get(timeout=30)
        # The model waits for the gate before its second chunk: only this test opens it.
        assert error is None and _token(first) == 0 and answers.empty()
        (files / f"gate-{tag}").touch()
        (second, _), (last, _) = _take(answers, 2)
    finally:
        client.stop_stream()
    assert _token(second) == 1 and not _final(second)
    assert _final(last)


def test_an_error_mid_stream_is_an_error_response_and_the_stream_goes_on(client: Any) -> None:
    answers = _open(client)
    try:
        client.async_stream_infer(
            "broken", _inputs(2), request_id="bad", enable_empty_final_response=True
        )
        client.async_stream_infer("tokens", _inputs(1), request_id="after")
        got = _take(answers, 4)
    finally:
        client.stop_stream()
    assert [_token(result) for result, _ in got[:2]] == [0, 1]
    failed, error = got[2]
    assert failed is None and "broken after 2 chunks" in error.message()
    after, error = got[3]  # the error ended the request: no empty final response for it
    assert error is None and after.get_response().id == "after" and _token(after) == 0


def test_a_bad_final_response_parameter_is_refused_on_the_stream(server: ServerProcess) -> None:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="tokens", id="typed")
    request.inputs.add(name="n", datatype="INT64", shape=[2]).contents.int64_contents.extend([1, 0])
    request.parameters["triton_enable_empty_final_response"].string_param = "yes"
    metadata = tuple(HEADERS.items())
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        (answer,) = stub.ModelStreamInfer(iter([request]), metadata=metadata, timeout=30)
    assert "triton_enable_empty_final_response parameter must be a bool" in answer.error_message
    assert answer.infer_response.id == "typed"
    assert answer.infer_response.parameters["triton_final_response"].bool_param


@pytest.mark.parametrize("model", ["endless", "async-endless"])
def test_a_client_that_cancels_closes_the_generator(client: Any, files: Path, model: str) -> None:
    tag = next(_tags)
    answers = _open(client)
    try:
        client.async_stream_infer(model, _inputs(0, tag))
        result, error = answers.get(timeout=30)
        assert error is None and _token(result) == 0
    finally:
        client.stop_stream(cancel_requests=True)
    closed = files / f"closed-{tag}"
    deadline = time.monotonic() + 30
    while not closed.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert closed.exists(), "the generator's finally did not run"


def test_a_stream_without_credentials_is_refused(client: Any) -> None:
    answers = _open(client, headers=None)
    try:
        # the refusal may end the call before the request is sent: the callback tells
        with contextlib.suppress(InferenceServerException):
            client.async_stream_infer("tokens", _inputs(1))
        result, error = answers.get(timeout=30)
    finally:
        client.stop_stream()
    assert result is None and error.status() == "StatusCode.UNAUTHENTICATED"


def test_the_async_client_reads_every_chunk(server: ServerProcess) -> None:
    import tritonclient.grpc.aio as aioclient

    async def calls() -> list[tuple[Any, Any]]:
        client = aioclient.InferenceServerClient(server.grpc_address)
        tensor = aioclient.InferInput("n", [2], "INT64")
        tensor.set_data_from_numpy(np.array([3, 0], dtype=np.int64))

        async def requests() -> Any:
            parameters = {"triton_enable_empty_final_response": True}
            yield {"model_name": "async-tokens", "inputs": [tensor], "parameters": parameters}

        try:
            stream = client.stream_infer(requests(), headers=HEADERS)
            return [answer async for answer in stream]
        finally:
            await client.close()

    got = asyncio.run(calls())
    assert all(error is None for _, error in got)
    assert [_final(result) for result, _ in got] == [False, False, False, True]
    assert [_token(result) for result, _ in got[:3]] == [0, 1, 2]
