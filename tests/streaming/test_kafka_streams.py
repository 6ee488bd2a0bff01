"""Streamed answers through the Kafka trigger, on the real tansu broker: one message per
chunk with its sequence number and a final marker, the joined form, and an error
mid-stream as the marker's error (docs/deployment.md#streamed-answers)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlserve.cli import load_function
from mlserve.kafka import KafkaTrigger, TriggerOptions
from tests.kafka import topics
from tests.netserver import start_server
from tests.services import ProcessService

FN = str(Path(__file__).with_name("grpc_fn.py"))


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("STREAM_TEST_DIR", str(tmp_path))
    server = load_function(FN).to_mock_server()
    yield server
    server.wait_for_completion()


def _options(kafka: ProcessService, **extra: Any) -> TriggerOptions:
    tag = uuid.uuid4().hex[:8]
    return TriggerOptions(
        f"in-{tag}", kafka.url, f"group-{tag}", f"out-{tag}", f"dead-{tag}", **extra
    )


def _message(key: bytes, model: str, count: int, operation: str = "") -> tuple[bytes, bytes, list]:
    """A message to ``model``; a streaming model streams unless ``operation`` says ``infer``."""
    body: dict[str, Any] = {
        "model": model,
        "inputs": [{"name": "n", "datatype": "INT64", "shape": [2], "data": [count, 0]}],
    }
    if operation:
        body["operation"] = operation
    return key, json.dumps(body).encode(), [("trace", b"t-" + key)]


def _run(server: Any, options: TriggerOptions, outputs: int, dead: int = 0) -> tuple[list, list]:
    trigger = KafkaTrigger(server, options).start()
    try:
        results = topics.read(options.brokers, options.output_topic or "", outputs)
        letters = topics.read(options.brokers, options.dead_letter_topic or "", dead, 10)
    finally:
        trigger.stop()
    assert trigger.error is None
    return results, letters


def _by_key(messages: list[Any]) -> dict[bytes, list[tuple[dict[str, bytes], bytes]]]:
    """Each key's messages (headers, value), ordered by their ``mlserve-seq``."""
    found: dict[bytes, list[tuple[dict[str, bytes], bytes]]] = {}
    for message in messages:
        found.setdefault(message.key(), []).append((dict(message.headers()), message.value()))
    for sent in found.values():
        sent.sort(key=lambda m: int(m[0].get("mlserve-seq", b"0")))
    return found


def _token(value: bytes) -> int:
    """The token a chunk message carries."""
    (output,) = json.loads(value)["outputs"]
    return int(output["data"][0])


def test_each_chunk_is_a_message_then_a_final_marker(kafka: ProcessService, server: Any) -> None:
    options = _options(kafka)
    sent = [_message(b"a", "tokens", 3), _message(b"b", "async-tokens", 2)]
    sent.append(_message(b"c", "plain", 2))  # an ordinary answer: one message
    sent.append(_message(b"d", "tokens", 2, operation="infer"))  # asked gathered: one message
    topics.produce(kafka.url, options.topic, sent)
    results, _ = _run(server, options, 4 + 3 + 1 + 1)
    by_key = _by_key(results)
    assert sorted(by_key) == [b"a", b"b", b"c", b"d"]

    for key, count in ((b"a", 3), (b"b", 2)):
        messages = by_key[key]
        assert len(messages) == count + 1
        chunks, (marker, value) = messages[:-1], messages[-1]
        assert [_token(v) for _, v in chunks] == list(range(count))
        assert [h["mlserve-seq"] for h, _ in messages] == [
            str(i).encode() for i in range(count + 1)
        ]
        assert value == b"" and marker["mlserve-final"] == b"1" and "mlserve-error" not in marker
        assert all("mlserve-final" not in h for h, _ in chunks)
        ids = {h["mlserve-request-id"] for h, _ in messages}
        assert len(ids) == 1 and ids != {b""}  # one request, named the same in every message
        assert all(h["trace"] == b"t-" + key for h, _ in messages)  # the input's headers kept
        assert all(h["mlserve-source"].startswith(options.topic.encode()) for h, _ in messages)

    ((headers, value),) = by_key[b"c"]
    assert "mlserve-seq" not in headers and "mlserve-streamed" not in headers
    assert json.loads(value)["outputs"][0]["data"] == [0, 1]
    ((headers, value),) = by_key[b"d"]  # the chunks gathered, as infer gathers them
    assert "mlserve-seq" not in headers and len(json.loads(value)["outputs"][0]["data"]) == 2

    # Committed once the final markers were delivered: the group reads nothing again.
    topics.produce(kafka.url, options.topic, [_message(b"late", "tokens", 1)])
    results, _ = _run(server, options, 9 + 2)
    assert len(results) == 11 and len(_by_key(results)[b"late"]) == 2


def test_joined_the_chunks_are_one_message(kafka: ProcessService, server: Any) -> None:
    options = _options(kafka, stream_output="joined")
    topics.produce(kafka.url, options.topic, [_message(b"j", "tokens", 3)])
    results, _ = _run(server, options, 1)
    (message,) = results
    headers = dict(message.headers())
    assert headers["mlserve-streamed"] == b"1" and "mlserve-seq" not in headers
    chunks = json.loads(message.value())  # the chunks in a list, each as its message would be
    assert [chunk["outputs"][0]["data"] for chunk in chunks] == [[0], [1], [2]]


def test_an_error_mid_stream_is_told_by_the_final_marker(
    kafka: ProcessService, server: Any
) -> None:
    """The trigger goes on: the next message is answered, nothing is dead-lettered; joined,
    the stream's failure is the message's (dead-lettered, its status)."""
    options = _options(kafka, retries=0)
    topics.produce(
        kafka.url, options.topic, [_message(b"bad", "broken", 2), _message(b"next", "tokens", 1)]
    )
    results, letters = _run(server, options, 3 + 2)
    by_key = _by_key(results)
    assert letters == []
    *chunks, (marker, value) = by_key[b"bad"]
    assert [_token(v) for _, v in chunks] == [0, 1]
    assert value == b"" and marker["mlserve-final"] == b"1" and marker["mlserve-seq"] == b"2"
    assert marker["mlserve-status"] == b"500"
    assert b"broken after 2 chunks" in marker["mlserve-error"]
    assert [_token(v) for _, v in by_key[b"next"][:1]] == [0]

    joined = _options(kafka, retries=0, stream_output="joined")
    topics.produce(kafka.url, joined.topic, [_message(b"bad", "broken", 2)])
    results, letters = _run(server, joined, 0, 1)
    assert results == [] and len(letters) == 1
    assert dict(letters[0].headers())["mlserve-status"] == b"500"


def test_serve_stream_output_joined(kafka: ProcessService, tmp_path: Path) -> None:
    """``mlserve serve --kafka ... --stream-output joined``: the flag reaches the trigger."""
    options = _options(kafka)
    topics.produce(kafka.url, options.topic, [_message(b"j", "tokens", 2)])
    member = start_server(
        "--kafka",
        f"{options.topic}@{kafka.url}",
        "--group",
        options.group,
        "--output-topic",
        options.output_topic or "",
        "--stream-output",
        "joined",
        target="tests/streaming/grpc_fn.py",
        env={"STREAM_TEST_DIR": str(tmp_path)},
    )
    try:
        (message,) = topics.read(kafka.url, options.output_topic or "", 1)
    finally:
        member.stop()
    assert dict(message.headers())["mlserve-streamed"] == b"1"
    assert len(json.loads(message.value())) == 2


def test_an_unknown_stream_output_is_refused() -> None:
    with pytest.raises(ValueError, match="stream_output is one of chunks, joined, not 'both'"):
        TriggerOptions("t", "127.0.0.1:9092", "g", stream_output="both")
