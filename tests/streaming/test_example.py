"""The streaming example (examples/chars.py, docs/streaming.md#the-example-a-character-model)
trains, serves and streams: in-process through the mock server, and from a real
``mlserve serve`` read by curl, httpx and tritonclient's gRPC stream, as the guide calls it."""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import mlserve
from tests.netserver import ServerProcess, start_server

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
EXAMPLE = EXAMPLES / "chars.py"
PROMPT = {"inputs": ["The "], "parameters": {"max_tokens": 40, "seed": 3}}


def _tensor_body(max_tokens: int, **parameters: Any) -> dict[str, Any]:
    text = {"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["The "]}
    return {"inputs": [text], "parameters": {"max_tokens": max_tokens, **parameters}}


@pytest.fixture(scope="module")
def mock() -> mlserve.GraphServer:
    return runpy.run_path(str(EXAMPLE))["serving_function"]().to_mock_server()


def test_training_is_deterministic_and_small(tmp_path: Path) -> None:
    train = runpy.run_path(str(EXAMPLES / "train_chars.py"))
    first = train["train"](train["corpus"]())
    second = train["train"](train["corpus"]())
    assert first.keys() == second.keys() == {"order", "alphabet", "grams", "counts"}
    assert all(np.array_equal(first[key], second[key]) for key in first)
    assert "Beautiful is better than ugly." in train["corpus"]()  # the Zen of Python
    path = train["save"](tmp_path)
    assert path.stat().st_size < 200_000
    committed = np.load(EXAMPLES / "models" / "chars" / "model.npz")
    assert all(np.array_equal(committed[key], first[key]) for key in first)  # from corpus.txt


def test_the_model_writes_only_what_it_has_read(tmp_path: Path) -> None:
    """From a prompt of the training text, each next character follows the longest
    context (5 characters) as it did in the text: every 6 characters written were read.
    Trained afresh: the committed model read the guides as they were then."""
    train = runpy.run_path(str(EXAMPLES / "train_chars.py"))
    train["save"](tmp_path)
    fn = mlserve.new_function("fresh")
    fn.add_model(
        "chars", model_path=str(tmp_path), class_name=runpy.run_path(str(EXAMPLE))["CharModel"]
    )
    body = {"inputs": ["Beautiful"], "parameters": {"max_tokens": 300, "seed": 7}}
    chunks = fn.to_mock_server().test("/v2/models/chars/infer_stream", body=body)
    text = "Beautiful" + "".join(chunk["outputs"] for chunk in chunks)
    corpus = train["corpus"]()
    assert len(text) == 309
    assert all(text[i : i + 6] in corpus for i in range(len(text) - 5))


def test_the_mock_server_streams_one_character_per_chunk(mock: mlserve.GraphServer) -> None:
    chunks = mock.test("/v2/models/chars/infer_stream", body=PROMPT)
    assert not isinstance(chunks, dict)  # a generator of chunk bodies
    text = [chunk["outputs"] for chunk in chunks]
    assert len(text) == 40 and all(isinstance(c, str) and len(c) == 1 for c in text)
    again = [c["outputs"] for c in mock.test("/v2/models/chars/infer_stream", body=PROMPT)]
    assert again == text  # the same seed, the same text
    cold = {"inputs": ["The "], "parameters": {"max_tokens": 40, "temperature": 0}}
    greedy = [c["outputs"] for c in mock.test("/v2/models/chars/infer_stream", body=cold)]
    assert greedy == [c["outputs"] for c in mock.test("/v2/models/chars/infer_stream", body=cold)]


def test_tensor_requests_stream_text_output_and_infer_gathers_it(
    mock: mlserve.GraphServer,
) -> None:
    chunks = list(mock.test("/v2/models/chars/infer_stream", body=_tensor_body(5, seed=1)))
    outputs = [chunk["outputs"] for chunk in chunks]
    assert [o[0]["name"] for o in outputs] == ["text_output"] * 5
    assert all(o[0]["datatype"] == "BYTES" and o[0]["shape"] == [1] for o in outputs)
    answer = mock.test("/v2/models/chars/infer", body=_tensor_body(5, seed=1))
    gathered = answer["outputs"][0]
    assert gathered["shape"] == [5]
    assert gathered["data"] == [o[0]["data"][0] for o in outputs]


@pytest.mark.parametrize(
    "parameters",
    [{"max_tokens": 0}, {"max_tokens": 5000}, {"max_tokens": "many"}, {"temperature": "hot"}],
)
def test_bad_settings_are_a_400_before_any_chunk(
    mock: mlserve.GraphServer, parameters: dict[str, Any]
) -> None:
    body = {"inputs": ["The "], "parameters": parameters}
    response = mock.test("/v2/models/chars/infer_stream", body=body, silent=True, get_body=False)
    assert response.status_code == 400
    assert "max_tokens" in json.loads(response.body)["error"]


def test_the_script_prints_a_streamed_text(capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert out.startswith("The ") and len(out) == len("The ") + 200 + len("\n")


# ---- a real server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    process = start_server(target="examples/chars.py")
    yield process
    process.stop()


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The ``data:`` events of a server-sent event stream, decoded; an error event fails."""
    event = ""
    for line in lines:
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            assert event != "error", line
            yield json.loads(line.split(":", 1)[1])


def test_generate_stream_sends_each_character_as_an_event(served: ServerProcess) -> None:
    body = {"text_input": "The ", "max_tokens": 40}
    url = f"{served.url}/v2/models/chars/generate_stream"
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(_events(response.iter_lines()))
    assert len(events) == 40
    assert all(e["model_name"] == "chars" and len(e["text_output"]) == 1 for e in events)


def test_infer_stream_and_generate_answer_the_same_text(served: ServerProcess) -> None:
    body = _tensor_body(30, seed=5)
    url = f"{served.url}/v2/models/chars/infer_stream"
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        streamed = [e["outputs"][0]["data"][0] for e in _events(response.iter_lines())]
    flat = {"text_input": "The ", "max_tokens": 30, "parameters": {"seed": 5}}
    answer = httpx.post(f"{served.url}/v2/models/chars/generate", json=flat, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["text_output"] == "".join(streamed) and len(streamed) == 30


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_guides_curl_call_streams(served: ServerProcess) -> None:
    command = [
        "curl",
        "-sN",
        "-X",
        "POST",
        f"{served.url}/v2/models/chars/generate_stream",
        "-d",
        '{"text_input": "The ", "max_tokens": 40}',
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    assert len(list(_events(iter(out.splitlines())))) == 40


_TRITON = """
import queue, sys
import numpy as np
import tritonclient.grpc as triton

received = queue.Queue()
client = triton.InferenceServerClient(sys.argv[1])
client.start_stream(callback=lambda result, error: received.put(error or result))
prompt = triton.InferInput("text_input", [1], "BYTES")
prompt.set_data_from_numpy(np.array([b"The "], dtype=object))
client.async_stream_infer(
    "chars", [prompt], parameters={"max_tokens": 40}, enable_empty_final_response=True
)
text = ""
while True:
    result = received.get(timeout=30)
    if isinstance(result, Exception):
        raise result
    if result.get_response().parameters["triton_final_response"].bool_param:
        break
    text += result.as_numpy("text_output")[0].decode()
client.stop_stream()
print(len(text))
"""


def test_tritonclient_receives_the_stream_over_grpc(served: ServerProcess) -> None:
    """The guide's tritonclient program, in a process of its own (its stubs and
    mlserve's share the ``inference`` package)."""
    pytest.importorskip("tritonclient.grpc")
    argv = [sys.executable, "-c", _TRITON, served.grpc_address]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "40"


def test_the_guides_sequence_picture_is_what_its_script_draws() -> None:
    """docs/images/streaming.svg is generated (``make docs-images``): it cannot drift."""
    from tools import sequence

    assert sequence.OUT.read_text() == sequence.svg()
