"""Streaming as a reviewer tries it first (docs/streaming.md): the corners of a real
server's faces (an empty stream, a failure before the first chunk), a streaming model
among a VotingEnsemble's voters, and the guide's own commands."""

from __future__ import annotations

import queue
import re
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import mlserve
from tests.netserver import ServerProcess, start_server

grpcclient = pytest.importorskip("tritonclient.grpc")

GUIDE = Path(__file__).resolve().parent.parent.parent / "docs" / "streaming.md"
BODY = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [1], "data": [3]}]}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = start_server(target="tests/streaming/review_fn.py")
    yield process
    process.stop()


def _raw_post(server: ServerProcess, path: str) -> bytes:
    """The whole answer, as bytes on the wire, of a POST that closes its connection."""
    payload = b'{"inputs": [1]}'
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head.encode() + payload)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def _stream(client: Any, model: str, final: bool) -> queue.Queue[tuple[Any, Any]]:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    tensor = grpcclient.InferInput("x", [1], "INT64")
    tensor.set_data_from_numpy(np.array([3], dtype=np.int64))
    client.async_stream_infer(model, [tensor], enable_empty_final_response=final)
    client.async_stream_infer("plain", [tensor])  # then a one-shot request on the same stream
    return answers


@pytest.mark.parametrize("route", ["infer_stream", "generate_stream"])
def test_an_empty_generator_is_an_sse_stream_with_no_event(
    server: ServerProcess, route: str
) -> None:
    answer = _raw_post(server, f"/v2/models/empty/{route}")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"content-type: text/event-stream" in head.lower()
    assert b"transfer-encoding: chunked" in head.lower()
    assert body == b"0\r\n\r\n"  # no event, then the end of the chunked body
    gathered = httpx.post(f"{server.url}/v2/models/empty/infer", json=BODY, timeout=30)
    assert gathered.status_code == 200 and gathered.json()["outputs"] == []


def test_a_one_shot_generate_of_an_empty_stream_still_names_the_model(
    server: ServerProcess,
) -> None:
    url = f"{server.url}/v2/models/empty/generate"
    answer = httpx.post(url, json={"text_input": "hi", "id": "q1"}, timeout=30)
    assert answer.status_code == 200
    assert answer.json() == {"id": "q1", "model_name": "empty", "model_version": ""}


@pytest.mark.parametrize("final", [True, False])
def test_an_empty_generator_over_grpc_is_only_the_final_flag_if_asked(
    server: ServerProcess, final: bool
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        answers = _stream(client, "empty", final)
        got = [answers.get(timeout=30) for _ in range(2 if final else 1)]
        client.stop_stream()
    finally:
        client.close()
    assert all(error is None for _, error in got)
    if final:
        response = got[0][0].get_response()
        assert response.model_name == "empty" and not response.outputs
        assert response.parameters["triton_final_response"].bool_param
    last = got[-1][0].get_response()
    assert last.model_name == "plain" and got[-1][0].as_numpy("output-0").tolist() == [6]
    assert answers.empty()


@pytest.mark.parametrize("model", ["early", "early-async"])
@pytest.mark.parametrize("route", ["infer_stream", "generate_stream", "infer"])
def test_a_failure_before_the_first_chunk_is_a_status_not_a_stream(
    server: ServerProcess, model: str, route: str
) -> None:
    answer = httpx.post(f"{server.url}/v2/models/{model}/{route}", json=BODY, timeout=30)
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"error": "ValueError: no first chunk"}


def test_a_failure_before_the_first_chunk_over_grpc_is_an_error_response(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        answers = _stream(client, "early", True)
        (_, error), (after, later_error) = answers.get(timeout=30), answers.get(timeout=30)
        client.stop_stream()
    finally:
        client.close()
    assert "ValueError: no first chunk" in str(error)
    assert later_error is None and after.get_response().model_name == "plain"  # it goes on


class Tokens(mlserve.V2ModelServer):
    def predict(self, request: Any) -> Iterator[float]:
        yield 1.0
        yield 3.0


class Once(mlserve.V2ModelServer):
    def predict(self, request: Any) -> list[float]:
        return [3.0, 5.0]


def test_a_voting_ensemble_votes_on_a_streaming_models_gathered_chunks() -> None:
    """A vote needs whole answers: each voter is asked ``infer`` (the chunks gathered),
    also when the ensemble is asked ``infer_stream``, which it answers with one chunk
    as a model that does not stream does (and so ``generate``, which reads that stream)."""
    fn = mlserve.new_function("stream-vote")
    fn.set_topology("router", "mlserve.graph.VotingEnsemble", name="vote", vote_type="regression")
    fn.add_model("tokens", class_name=Tokens)
    fn.add_model("once", class_name=Once)
    server = fn.to_mock_server()
    body = {"inputs": [[1.0], [2.0]]}
    assert server.test("/v2/models/vote/infer", body=body)["outputs"] == [2.0, 4.0]
    chunks = server.test("/v2/models/vote/infer_stream", body=body)
    assert not isinstance(chunks, dict)  # a stream, as the SSE face needs
    assert [chunk["outputs"] for chunk in chunks] == [[2.0, 4.0]]
    generated = server.test("/v2/models/vote/generate", body={"x": [[1.0], [2.0]]})
    assert generated == {"model_name": "vote", "model_version": "v1", "output-0": [2.0, 4.0]}
    streamed = list(server.test("/v2/models/tokens/infer_stream", body=body))
    assert [chunk["outputs"] for chunk in streamed] == [1.0, 3.0]  # a voter still streams alone


def test_the_guides_server_serves_the_grpc_port_its_clients_call() -> None:
    """The server every call of the example section is sent to listens where they call."""
    guide = GUIDE.read_text()
    serve = re.search(r"^mlserve serve examples/chars\.py.*$", guide, re.MULTILINE)
    assert serve is not None and "--grpc-port 8081" in serve[0]
    assert 'InferenceServerClient("localhost:8081")' in guide


def words(body: Any) -> Iterator[str]:
    yield from body["text"].split()


def test_a_parallel_run_merges_a_streaming_models_gathered_chunks() -> None:
    fn = mlserve.new_function("stream-parallel")
    fn.set_topology("router", "mlserve.graph.ParallelRun", name="both")
    fn.add_model("tokens", class_name=Tokens)
    server = fn.to_mock_server()
    assert server.test("/", body={"inputs": [[1.0]]})["outputs"] == [1.0, 3.0]


async def async_words(body: Any) -> AsyncIterator[str]:
    for word in body["text"].split():
        yield word


@pytest.mark.parametrize(
    ("engine", "handler"), [("sync", words), ("async", words), ("async", async_words)]
)
def test_a_parallel_run_refuses_a_step_that_yields_naming_it(engine: str, handler: Any) -> None:
    fn = mlserve.new_function("stream-parallel-steps")
    graph = fn.set_topology("flow", engine=engine)
    parallel = graph.to("*mlserve.ParallelRun", name="features")
    parallel.add_route("words", handler=handler)
    parallel.respond()
    server = fn.to_mock_server()
    refused = server.test("/", body={"text": "a b"}, silent=True, get_body=False)
    server.wait_for_completion()
    assert refused.status_code == 500
    assert b"route 'words' streams: ParallelRun merges whole answers" in refused.body
