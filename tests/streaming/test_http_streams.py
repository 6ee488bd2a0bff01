"""Streamed answers over HTTP (docs/protocol.md#streaming-over-http): real ``mlserve
serve`` processes, the lean face and the ASGI app under uvicorn, read by plain
clients chunk by chunk; and Triton's generate extension
(docs/protocol.md#generate-and-generate_stream)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mlserve
from tests.netserver import start_server
from tests.streaming import http_fn

FN = "tests/streaming/http_fn.py"
TOKEN = "stream-secret"
ROWS = {"inputs": [1]}  # a rows request: each chunk's ``outputs`` is what the model yielded


class Served:
    """A server process and the folder its models write their progress into."""

    def __init__(self, folder: Path, *args: str) -> None:
        self.folder = folder
        self.process = start_server(*args, target=FN, env={"MLSERVE_STREAM_TEST_DIR": str(folder)})
        self.url = self.process.url

    def reset(self) -> None:
        for name in ("release", "finally", "produced"):
            (self.folder / name).unlink(missing_ok=True)

    def wait_for(self, name: str) -> str:
        """The text of the file ``name`` once the model wrote it (30 s at most)."""
        path = self.folder / name
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline, f"the model never wrote {name}"
            time.sleep(0.02)
        time.sleep(0.05)  # written whole
        return path.read_text()


def _serve(factory: pytest.TempPathFactory, name: str, *args: str) -> Iterator[Served]:
    served = Served(factory.mktemp(name), *args)
    yield served
    served.process.stop()


@pytest.fixture(scope="module")
def lean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from _serve(tmp_path_factory, "lean")


@pytest.fixture(scope="module")
def asgi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from _serve(tmp_path_factory, "asgi", "--http", "asgi")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Credentials required, errors hidden, short idle and unread-answer timeouts."""
    yield from _serve(
        tmp_path_factory, "guarded", "--auth-token", TOKEN, "--hide-errors",
        "--keep-alive-timeout", "0.5", "--write-timeout", "0.5",
    )  # fmt: skip


@pytest.fixture(params=["lean", "asgi"])
def server(request: pytest.FixtureRequest) -> Served:
    served: Served = request.getfixturevalue(request.param)
    served.reset()
    return served


def read_event(lines: Iterator[str]) -> tuple[str, Any] | None:
    """The next server-sent event as (type, decoded data); None at the end."""
    kind, data = "message", None
    for line in lines:
        if not line:
            if data is not None:
                return kind, json.loads(data)
            continue
        field, _, value = line.partition(": ")
        if field == "event":
            kind = value
        elif field == "data":
            data = value
    assert data is None, "the stream ended inside an event"
    return None


def read_events(lines: Iterator[str]) -> list[tuple[str, Any]]:
    found = []
    while (event := read_event(lines)) is not None:
        found.append(event)
    return found


def stream_all(url: str, path: str, body: object, **kwargs: Any) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30, **kwargs)


def parse(text: str) -> list[tuple[str, Any]]:
    return read_events(iter(text.split("\n")))


# ---- chunk by chunk ---------------------------------------------------------------


def test_the_first_chunk_comes_while_the_model_still_waits(server: Served) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream("POST", "/v2/models/gated/infer_stream", json=ROWS) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            assert response.headers["cache-control"] == "no-cache"
            assert response.headers["transfer-encoding"] == "chunked"
            assert "content-length" not in response.headers
            lines = response.iter_lines()
            first = read_event(lines)
            # the model waits for the release file, written only now: a server that held
            # the answer back until the model ended would never have sent this chunk
            assert first is not None and first[1]["outputs"] == {"step": "first"}
            assert first[1]["model_name"] == "gated"
            assert not (server.folder / "finally").exists()
            (server.folder / "release").write_text("")
            rest = read_events(lines)
        assert [data["outputs"] for _, data in rest] == [{"step": 0}]
        assert server.wait_for("finally") == "ended"
        # keep-alive: the next request on the same connection is answered
        assert client.get("/v2/health/ready").status_code == 200


def test_a_client_that_leaves_closes_the_generator(server: Served) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream("POST", "/v2/models/gated/infer_stream", json={"inputs": [500]}) as r:
            assert read_event(r.iter_lines()) is not None
        # the connection is closed, the rest unread; the model may go on now
    (server.folder / "release").write_text("")
    assert server.wait_for("finally") == "closed"  # its finally ran, long before 500 chunks


def test_a_client_that_leaves_cancels_a_waiting_async_generator(server: Served) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream("POST", "/v2/models/async-gated/infer_stream", json=ROWS) as r:
            assert read_event(r.iter_lines()) is not None
    # never released: the generator is closed while it awaits, its finally runs now
    assert server.wait_for("finally") == "closed"


def test_an_error_mid_stream_is_the_last_event(server: Served) -> None:
    response = stream_all(server.url, "/v2/models/failing/infer_stream", ROWS)
    assert response.status_code == 200
    events = parse(response.text)
    assert [(kind, data.get("outputs")) for kind, data in events[:2]] == [
        ("message", {"n": 0}),
        ("message", {"n": 1}),
    ]
    assert len(events) == 3
    kind, data = events[2]
    assert kind == "error"
    assert "the secret cause at chunk 2" in data["error"]


def test_a_stream_is_never_compressed(server: Served) -> None:
    headers = {"Accept-Encoding": "gzip"}
    response = stream_all(
        server.url, "/v2/models/words/infer_stream", _text("a b"), headers=headers
    )
    assert "content-encoding" not in response.headers
    assert [data["outputs"][0]["data"] for _, data in parse(response.text)] == [["A"], ["B"]]


def test_a_model_that_does_not_stream_answers_one_event(server: Served) -> None:
    response = stream_all(server.url, "/v2/models/upper/infer_stream", _text("hi"))
    events = parse(response.text)
    assert len(events) == 1
    outputs = {o["name"]: o["data"] for o in events[0][1]["outputs"]}
    assert outputs == {"text_output": ["HI"], "length": [2]}


# ---- a slow reader ------------------------------------------------------------------


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _produced(served: Served) -> int:
    """The producer's count once it stopped moving: it waits for the reader."""
    path = served.folder / "produced"
    last = -1
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = int(path.read_text() or 0) if path.exists() else 0
        if now == last:
            return now
        last = now
    raise AssertionError("the producer never stopped")


def test_a_slow_reader_holds_the_producer_back_and_memory_bounded(server: Served) -> None:
    total = 50_000
    pid = server.process.proc.pid
    assert stream_all(server.url, "/v2/models/many/infer_stream", {"inputs": [10]}).is_success
    before = _rss_kib(pid)
    body = json.dumps({"inputs": [total]}).encode()
    head = (
        f"POST /v2/models/many/infer_stream HTTP/1.1\r\nhost: x\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", server.process.port))
        sock.sendall(head.encode() + body)
        received = bytearray()
        while b"data: " not in received:  # one chunk read, then nothing for a while
            received += sock.recv(4096)
        produced = _produced(server)
        grown_mib = (_rss_kib(pid) - before) / 1024
        print(f"slow reader: {produced} of {total} chunks produced, RSS +{grown_mib:.1f} MiB")
        assert produced < total // 2, produced  # held back by the unread answer
        assert grown_mib < 50, grown_mib
        sock.settimeout(60)
        while not received.endswith(b"0\r\n\r\n"):
            data = sock.recv(1 << 20)
            assert data, "the connection closed before the end"
            received += data
    assert received.count(b"data: {") == total
    assert int((server.folder / "produced").read_text()) == total


# ---- the wire as a client sees it ----------------------------------------------------


def _raw(served: Served, request: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", served.process.port), timeout=30)
    sock.sendall(request)
    return sock


def _post(path: str, body: object, version: str = "1.1") -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/{version}\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    ).encode() + data


def test_keep_alive_after_a_stream_on_the_lean_face(lean: Served) -> None:
    sock = _raw(lean, _post("/v2/models/words/infer_stream", _text("one two")))
    with sock:
        received = b""
        while not received.endswith(b"\r\n0\r\n\r\n"):
            received += sock.recv(65536)
        head = received.partition(b"\r\n\r\n")[0].decode().lower()
        assert "transfer-encoding: chunked" in head and "connection: close" not in head
        assert received.count(b"data: ") == 2
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_an_http_1_0_client_reads_a_close_delimited_stream(lean: Served) -> None:
    # (under uvicorn the framing is uvicorn's: its httptools protocol sends chunks to
    # HTTP/1.0 clients too; docs/protocol.md#streaming-over-http)
    sock = _raw(lean, _post("/v2/models/words/infer_stream", _text("one two"), "1.0"))
    with sock:
        received = b""
        while data := sock.recv(65536):  # to the end: the server closes the connection
            received += data
    head, _, body = received.partition(b"\r\n\r\n")
    assert b"200" in head.split(b"\r\n")[0]
    assert b"transfer-encoding" not in head.lower()
    assert [data["outputs"][0]["data"] for _, data in parse(body.decode())] == [["ONE"], ["TWO"]]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_reads_the_stream_as_a_user_would(lean: Served) -> None:
    done = subprocess.run(
        [
            "curl", "-sN", "-X", "POST", lean.url + "/v2/models/words/generate_stream",
            "-d", '{"text_input": "as a user would"}',
        ],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    events = parse(done.stdout)
    assert [data["text_output"] for _, data in events] == ["AS", "A", "USER", "WOULD"]


# ---- credentials and hidden errors ------------------------------------------------------


def test_stream_routes_need_credentials(guarded: Served) -> None:
    for path, body in (
        ("/v2/models/words/infer_stream", _text("a")),
        ("/v2/models/words/generate_stream", {"text_input": "a"}),
        ("/v2/models/words/generate", {"text_input": "a"}),
    ):
        refused = stream_all(guarded.url, path, body)
        assert refused.status_code == 401, path
        assert refused.json() == {"error": "authentication required"}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    allowed = stream_all(
        guarded.url, "/v2/models/words/generate_stream", {"text_input": "a"}, headers=auth
    )
    assert allowed.status_code == 200
    assert [data["text_output"] for _, data in parse(allowed.text)] == ["A"]


def test_a_hidden_error_mid_stream_has_no_text(guarded: Served) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    response = stream_all(guarded.url, "/v2/models/failing/infer_stream", ROWS, headers=auth)
    kind, data = parse(response.text)[-1]
    assert kind == "error"
    assert "secret" not in data["error"] and "error id" in data["error"]


def test_a_slow_model_outlives_the_connection_timeouts(guarded: Served) -> None:
    # the idle and unread-answer timeouts are the client's; a model slow to yield is
    # limited by the stream timeouts alone
    guarded.reset()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=guarded.url, timeout=30, headers=auth) as client:
        with client.stream("POST", "/v2/models/gated/infer_stream", json=ROWS) as response:
            lines = response.iter_lines()
            assert read_event(lines) is not None
            time.sleep(2)  # four times either timeout, no chunk meanwhile
            (guarded.folder / "release").write_text("")
            assert [data["outputs"] for _, data in read_events(lines)] == [{"step": 0}]
    assert guarded.wait_for("finally") == "ended"


# ---- Triton's generate extension ------------------------------------------------------


def test_generate_answers_in_triton_form(server: Served) -> None:
    body = {"id": "42", "text_input": "hello", "parameters": {"temperature": 0}}
    response = stream_all(server.url, "/v2/models/upper/versions/1/generate", body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "id": "42",
        "model_name": "upper",
        "model_version": "1",
        "text_output": "HELLO",
        "length": 5,
    }


def test_generate_stream_sends_one_event_per_chunk(server: Served) -> None:
    body = {"text_input": "Hello Streaming World", "parameters": {"lower": True}}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream("POST", "/v2/models/words/generate_stream", json=body) as response:
            assert response.headers["content-type"] == "text/event-stream"
            events = read_events(response.iter_lines())
    assert [data for _, data in events] == [
        {"model_name": "words", "model_version": "", "text_output": word}
        for word in ("hello", "streaming", "world")
    ]


def test_generate_on_a_streaming_model_joins_its_texts(server: Served) -> None:
    """One-shot generate of a generative model: its tokens' texts joined, as a Triton
    client of an LLM reads ``text_output``."""
    response = stream_all(server.url, "/v2/models/words/generate", {"text_input": "a b"})
    assert response.json()["text_output"] == "AB"


def test_generate_stream_of_a_v2_request_answers_v2(server: Served) -> None:
    response = stream_all(server.url, "/v2/models/words/generate_stream", _text("x y"))
    events = parse(response.text)
    assert [data["outputs"][0]["name"] for _, data in events] == ["text_output"] * 2


def test_generate_errors_as_triton_answers_them(server: Served) -> None:
    bad = stream_all(server.url, "/v2/models/upper/generate", {"text_input": {"no": 1}})
    assert bad.status_code == 400
    assert "text_input" in bad.json()["error"]
    unknown = stream_all(server.url, "/v2/models/nobody/generate_stream", {"text_input": "a"})
    assert unknown.status_code == 404
    assert unknown.headers["content-type"] == "application/json"
    assert set(unknown.json()) == {"error"}
    not_json = httpx.post(server.url + "/v2/models/upper/generate", content=b"{", timeout=30)
    assert not_json.status_code == 400


# ---- the mock server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def mock() -> Iterator[Any]:
    fn: mlserve.ServingFunction = http_fn.serving_function()
    server = fn.to_mock_server()
    yield server
    server.wait_for_completion()


def test_generate_in_the_mock_server(mock: Any) -> None:
    answer = mock.test("/v2/models/upper/generate", {"text_input": "hi"})
    assert answer == {"model_name": "upper", "model_version": "1", "text_output": "HI", "length": 2}
    chunks = list(mock.test("/v2/models/words/generate_stream", {"text_input": "a b"}))
    assert [chunk["text_output"] for chunk in chunks] == ["A", "B"]
    one = list(mock.test("/v2/models/upper/generate_stream", {"text_input": "c"}))
    assert [chunk["text_output"] for chunk in one] == ["C"]
    failed = mock.test("/v2/models/failing/generate", {"x": 1}, silent=True)
    assert failed.status_code == 500  # a one-shot generate whose stream broke: the call failed


def test_generate_maps_fields_to_tensors() -> None:
    from mlserve.server.generate import generate_request

    request = generate_request(
        {"id": "1", "text_input": "hi", "n": 3, "t": 0.5, "ok": True, "xs": [[1, 2], [3, 4]]},
        {},
    )
    assert request["id"] == "1"
    assert [(i["name"], i["datatype"], i["shape"], i["data"]) for i in request["inputs"]] == [
        ("text_input", "BYTES", [1], ["hi"]),
        ("n", "INT64", [1], [3]),
        ("t", "FP64", [1], [0.5]),
        ("ok", "BOOL", [1], [True]),
        ("xs", "INT64", [2, 2], [1, 2, 3, 4]),
    ]
    declared = {"x": {"name": "x", "datatype": "FP32", "shape": [-1, 1]}}
    typed = generate_request({"x": 2, "max_tokens": 8}, declared)
    assert typed["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [2]}]
    assert typed["parameters"] == {"max_tokens": 8}  # a field the model does not declare


def test_a_one_shot_generate_joins_texts_and_lists_other_values() -> None:
    from mlserve.server.generate import joined

    forms = [
        {"model_name": "m", "model_version": "1", "text_output": t, "score": i}
        for i, t in enumerate(["Hel", "lo"])
    ]
    assert joined(forms) == {
        "model_name": "m",
        "model_version": "1",
        "text_output": "Hello",
        "score": [0, 1],
    }
    assert joined(forms[:1]) == forms[0]  # one chunk: as it came


def _text(text: str) -> dict[str, Any]:
    return {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [text]}]}
