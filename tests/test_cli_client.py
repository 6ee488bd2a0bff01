"""``mlserve infer`` and ``mlserve models`` against a real server
(docs/serving.md#asking-a-running-server)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.netserver import ROOT, ServerProcess, start_server
from tests.services import free_port

TOKEN = "cli-client-token"


def _mlserve(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlserve", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)


def _failed(done: subprocess.CompletedProcess[str], status: int, said: str) -> None:
    assert done.returncode == status, done.stderr
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """tests/http/fn.py, with a bearer token required."""
    running = start_server("--auth-token", TOKEN)
    yield running
    running.stop()


def test_models_lists_each_version_with_its_state(server: ServerProcess) -> None:
    done = _mlserve("models", server.url, "--token", TOKEN)
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[0] == ["NAME", "VERSION", "STATE", "REASON"]
    assert ["echo", "READY"] in rows and ["scale", "READY"] in rows
    assert ["version", "1", "READY"] in rows and ["version", "2", "READY"] in rows


def test_infer_takes_a_list_as_one_inputs_data(server: ServerProcess) -> None:
    done = _mlserve("infer", server.address, "echo", "--data", "[1, 2, 3]", "--token", TOKEN)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["model_name"], answer["outputs"]) == ("echo", [1, 2, 3])
    assert done.stdout.startswith("{\n  ")  # indented
    assert done.stderr.startswith("mlserve: answered in ") and done.stderr.endswith(" ms\n")


def test_infer_sends_a_v2_body_from_a_file_to_a_version(
    server: ServerProcess, tmp_path: Path
) -> None:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]}]}
    request = tmp_path / "request.json"
    request.write_text(json.dumps(body))
    header = f"Authorization: Bearer {TOKEN}"
    done = _mlserve(
        "infer", server.url, "version", "--version", "2", "--data", str(request), "--header", header
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["model_name"], answer["model_version"]) == ("version", "2")
    done = _mlserve("infer", server.url, "scale", "--data", json.dumps(body), "--token", TOKEN)
    outputs = {output["name"]: output["data"] for output in json.loads(done.stdout)["outputs"]}
    assert outputs == {"scaled": [3.0, 6.0, 9.0, 12.0], "total": [3.0, 7.0]}  # factor 3


def test_a_refusal_of_the_server_is_one_line_and_status_1(server: ServerProcess) -> None:
    _failed(
        _mlserve("infer", server.url, "nope", "--data", "[1]", "--token", TOKEN),
        1,
        "404 Not Found: Request for unknown model: 'nope' is not found (ModelNotFound)",
    )
    _failed(_mlserve("models", server.url), 1, "401")  # no token


def test_a_server_that_is_not_there_is_one_line_and_status_1() -> None:
    url = f"127.0.0.1:{free_port()}"
    _failed(_mlserve("models", url), 1, f"cannot reach http://{url}: Connection refused")
    _failed(_mlserve("infer", url, "m", "--data", "[1]"), 1, "cannot reach")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--data", "missing.json"], "--data missing.json: neither JSON nor a file"),
        (["--data", "{not json"], "--data is not JSON"),
        (["--data", "[1]", "--header", "no-colon"], "--header 'no-colon': give 'Name: value'"),
        ([], "the following arguments are required: --data"),
    ],
    ids=["no file", "bad json", "bad header", "no data"],
)
def test_infer_usage_errors_are_one_line_and_status_2(args: list[str], said: str) -> None:
    _failed(_mlserve("infer", "127.0.0.1:9", "m", *args), 2, said)


class _NoRepository(BaseHTTPRequestHandler):
    """A V2 server without the repository extension: a listing and readiness only."""

    def do_GET(self) -> None:
        answers = {
            "/v2/models": (200, {"models": ["iris", "broken:3"]}),
            "/v2/models/iris/ready": (200, {"name": "iris", "ready": True}),
            "/v2/models/broken/versions/3/ready": (503, {"error": "failed to load"}),
        }
        self._send(*answers.get(self.path, (404, {"error": "not found"})))

    def do_POST(self) -> None:
        self._send(404, {"error": "not found"})

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_models_falls_back_to_the_listing_and_readiness() -> None:
    listener = ThreadingHTTPServer(("127.0.0.1", 0), _NoRepository)
    thread = threading.Thread(target=listener.serve_forever, daemon=True)
    thread.start()
    try:
        done = _mlserve("models", f"127.0.0.1:{listener.server_address[1]}")
    finally:
        listener.shutdown()
        listener.server_close()
    assert done.returncode == 0, done.stderr
    assert [line.split(None, 3) for line in done.stdout.splitlines()] == [
        ["NAME", "VERSION", "STATE", "REASON"],
        ["iris", "READY"],
        ["broken", "3", "UNAVAILABLE", "failed to load"],
    ]
