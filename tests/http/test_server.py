"""mlserve's own HTTP/1.1 face (mlserve.http.server) over real sockets."""

from __future__ import annotations

import asyncio
import gzip
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvloop

import mlserve
from mlserve.core.sockets import bind_socket
from mlserve.http.server import HTTPServer
from tests.netserver import start_server
from tests.services import free_port

TENSOR = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]}
_release = threading.Event()


class Echo(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


class Wait(mlserve.V2ModelServer):
    """Blocks until the test releases it: a request in flight."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [_release.wait(30)]


class Headers(mlserve.V2ModelServer):
    """``/headers``: the headers of the request's Event, which it then changes."""

    def op_headers(self, event: Any) -> Any:
        seen = dict(event.headers)
        event.headers["x-added-by-the-model"] = "1"
        return seen


class Running:
    """An HTTPServer on a uvloop loop in a thread, on a free port."""

    def __init__(self) -> None:
        fn = mlserve.new_function("http-server")
        fn.add_model("echo", class_name=Echo, model_path=".")
        fn.add_model("wait", class_name=Wait, model_path=".")
        fn.add_model("headers", class_name=Headers, model_path=".")
        graph_server = fn.to_mock_server()
        self.http = HTTPServer(graph_server)
        self.port = free_port()
        self.loop = uvloop.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.http.start(bind_socket("127.0.0.1", self.port)))
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(30)

    def shutdown(self) -> None:
        asyncio.run_coroutine_threadsafe(self.http.shutdown(), self.loop).result(30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    running = Running()
    yield running
    running.stop()


def connect(server: Running) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def request(path: str, body: bytes = b"", method: str = "POST", headers: str = "") -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{length}{headers}\r\n"
    ).encode() + body


class Reader:
    """Reads HTTP/1.1 responses (Content-Length framed) off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def response(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"connection closed, got {self.buffer!r}"
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
        length = 0 if head_only else int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._fill()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed(self) -> bool:
        return not self.buffer and self.sock.recv(1) == b""


def echoed(body: bytes) -> list[float]:
    return json.loads(body)["outputs"][0]["data"]


def tensor(*values: float) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, len(values)], "datatype": "FP32", "data": list(values)}
            ]
        }
    ).encode()


def test_keep_alive_answers_several_requests_on_one_connection(server: Running) -> None:
    with connect(server) as sock:
        reader = Reader(sock)
        for i in range(5):
            sock.sendall(request("/v2/models/echo/infer", tensor(i, i + 1)))
            status, headers, body = reader.response()
            assert status == 200 and headers["content-type"] == "application/json"
            assert echoed(body) == [i, i + 1]
            assert "connection" not in headers


def test_pipelined_requests_are_answered_in_order(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"".join(request("/v2/models/echo/infer", tensor(i)) for i in range(20))
            + request("/v2/health/live", method="GET")
        )
        reader = Reader(sock)
        assert [echoed(reader.response()[2]) for _ in range(20)] == [[i] for i in range(20)]
        assert json.loads(reader.response()[2]) == {"live": True}


def test_request_split_across_packets(server: Running) -> None:
    data = request("/v2/models/echo/infer", tensor(7, 8))
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(data), 9):
            sock.sendall(data[i : i + 9])
        assert echoed(Reader(sock).response()[2]) == [7, 8]


def test_chunked_request_body(server: Running) -> None:
    body = tensor(3, 4)
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
    head = (
        b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    with connect(server) as sock:
        sock.sendall(head + chunks + b"0\r\n\r\n")
        status, _, answer = Reader(sock).response()
        assert status == 200 and echoed(answer) == [3, 4]


def test_expect_100_continue(server: Running) -> None:
    body = tensor(5)
    with connect(server) as sock:
        head = request("/v2/models/echo/infer", body, headers="Expect: 100-continue\r\n")
        sock.sendall(head[: -len(body)])
        reader = Reader(sock)
        status, _, _ = reader.response(head_only=True)
        assert status == 100
        sock.sendall(body)
        status, _, answer = reader.response()
        assert status == 200 and echoed(answer) == [5]


def test_malformed_request_gets_400_and_the_server_keeps_serving(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert status == 400 and headers["connection"] == "close"
        assert body == b"Invalid HTTP request received."
        assert reader.closed()
    with connect(server) as sock:
        sock.sendall(request("/v2/models/echo/infer", tensor(1)))
        assert echoed(Reader(sock).response()[2]) == [1]


def test_large_body(server: Running) -> None:
    values = [float(i) for i in range(200_000)]
    body = json.dumps(
        {"inputs": [{"name": "x", "shape": [1, len(values)], "datatype": "FP64", "data": values}]}
    ).encode()
    with connect(server) as sock:
        sock.sendall(request("/v2/models/echo/infer", body))
        status, _, answer = Reader(sock).response()
    assert status == 200 and echoed(answer) == values


def test_head_sends_the_headers_without_the_body(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(
            request("/v2/health/live", method="HEAD") + request("/v2/models/echo/infer", tensor(9))
        )
        reader = Reader(sock)
        status, headers, _ = reader.response(head_only=True)
        assert status == 200 and int(headers["content-length"]) == len(b'{"live":true}')
        assert echoed(reader.response()[2]) == [9]  # nothing of a body came in between


def test_connection_close_is_honoured(server: Running) -> None:
    with connect(server) as sock:
        sock.sendall(request("/v2/models/echo/infer", tensor(2), headers="Connection: close\r\n"))
        reader = Reader(sock)
        status, headers, body = reader.response()
        assert status == 200 and headers["connection"] == "close" and echoed(body) == [2]
        assert reader.closed()


def test_header_names_are_case_insensitive(server: Running) -> None:
    data = (
        b"POST /v2/models/echo/infer HTTP/1.1\r\nhOsT: x\r\ncOnTeNt-TyPe: application/json\r\n"
        b"CONTENT-LENGTH: %d\r\n\r\n%s" % (len(tensor(6)), tensor(6))
    )
    with connect(server) as sock:
        sock.sendall(data)
        assert echoed(Reader(sock).response()[2]) == [6]


def test_errors_and_binary_header_out(server: Running) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}") as client:
        assert client.post("/v2/models/nope/infer", json=TENSOR).status_code == 404
        assert client.post("/v2/models/echo/infer", content=b"{not json").status_code == 400
        binary = {
            "inputs": [{**TENSOR["inputs"][0], "parameters": {"binary_data": False}}],
            "outputs": [{"name": "output-0", "parameters": {"binary_data": True}}],
        }
        answer = client.post("/v2/models/echo/infer", json=binary)
    assert answer.status_code == 200
    length = int(answer.headers["inference-header-content-length"])
    assert json.loads(answer.content[:length])["outputs"][0]["parameters"]["binary_data_size"] == 8
    assert len(answer.content) == length + 8


def test_shutdown_drains_the_request_in_flight() -> None:
    running = Running()
    try:
        _release.clear()
        idle = connect(running)
        with connect(running) as sock:
            sock.sendall(request("/v2/models/wait/infer", tensor(1)))
            while not any(conn.busy for conn in list(running.http.connections)):
                time.sleep(0.01)
            done = asyncio.run_coroutine_threadsafe(running.http.shutdown(), running.loop)
            assert Reader(idle).closed()  # the idle keep-alive connection is closed at once
            with pytest.raises(OSError):
                connect(running).close()  # no new connections
            _release.set()
            status, headers, body = Reader(sock).response()
            done.result(30)
        assert status == 200 and headers["connection"] == "close"
        assert json.loads(body)["outputs"][0]["data"] == [True]
        idle.close()
    finally:
        _release.set()
        running.stop()


def test_asgi_face_under_uvicorn_serves_the_same() -> None:
    served = start_server("--http", "asgi")
    try:
        answer = httpx.post(
            served.url + "/v2/models/echo/infer",
            json={
                "inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}]
            },
        )
        assert answer.status_code == 200
        assert answer.json()["outputs"][0]["data"] == [1.0, 2.0]
        head = httpx.head(served.url + "/v2/health/live")
        assert head.status_code == 200 and head.content == b""
    finally:
        assert served.stop() == 0


def test_a_connection_whose_header_lines_change_is_answered_by_each_request_own(
    server: Running,
) -> None:
    """The protocol reuses the decoded head while a connection repeats its lines:
    every change (an encoding, an Expect, a header the model reads) must count."""
    body = tensor(1, 2)
    with connect(server) as sock:
        reader = Reader(sock)
        for _ in range(2):
            sock.sendall(request("/v2/models/echo/infer", body))
            status, _, answer = reader.response()
            assert status == 200 and echoed(answer) == [1, 2]
        packed = gzip.compress(tensor(3, 4))
        sock.sendall(request("/v2/models/echo/infer", packed, headers="Content-Encoding: gzip\r\n"))
        status, _, answer = reader.response()
        assert status == 200 and echoed(answer) == [3, 4]
        sock.sendall(request("/v2/models/echo/infer", body, headers="Content-Encoding: br\r\n"))
        assert reader.response()[0] == 415
        sock.sendall(request("/v2/models/echo/infer", body))
        assert echoed(reader.response()[2]) == [1, 2]
        head = request("/v2/models/echo/infer", body, headers="Expect: 100-continue\r\n")
        sock.sendall(head[: -len(body)])
        assert reader.response(head_only=True)[0] == 100
        sock.sendall(body)
        assert echoed(reader.response()[2]) == [1, 2]
        for trace in ("a", "a", "b"):
            traced = request("/v2/models/headers/headers", b"{}", headers=f"X-Trace: {trace}\r\n")
            sock.sendall(traced)
            seen = json.loads(reader.response()[2])
            assert seen["x-trace"] == trace and seen["content-length"] == "2"
            assert "x-added-by-the-model" not in seen  # each Event has headers of its own


def test_a_target_answered_once_is_still_checked_for_other_methods(server: Running) -> None:
    with connect(server) as sock:
        reader = Reader(sock)
        for _ in range(2):
            sock.sendall(request("/v2/models/echo/infer", tensor(1)))
            assert reader.response()[0] == 200
            for method in ("GET", "DELETE"):
                sock.sendall(request("/v2/models/echo/infer", method=method))
                status, headers, answer = reader.response()
                assert status == 405 and headers["allow"] == "POST", answer
            sock.sendall(request("/v2/models/echo/../echo/infer", tensor(1)))
            assert reader.response()[0] == 400
            sock.sendall(request("/v2/health/live", method="HEAD"))
            status, headers, _ = reader.response(head_only=True)
            assert status == 200 and headers["content-length"] == "13"
        sock.sendall(request("/v2/health/live", method="GET"))
        assert reader.response()[2] == b'{"live":true}'  # nothing of the HEAD answers' bodies came


def test_header_lines_over_the_size_limit_are_refused_before_the_head_ends(
    server: Running,
) -> None:
    """Lines that come one read at a time are counted as they come (64 KiB by default)."""
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        for i in range(90):  # 90 lines of 1 KiB: the head would never end
            sock.sendall(b"X-Filler-%02d: %s\r\n" % (i, b"v" * 1024))
            if select.select([sock], [], [], 0.02)[0]:
                break
        status, headers, answer = Reader(sock).response()
    assert i < 89 and status == 431 and headers["connection"] == "close"
    assert b"65536 bytes" in answer


def test_header_lines_over_the_count_limit_are_refused_before_the_head_ends(
    server: Running,
) -> None:
    """Lines are counted after each read (100 by default), as their bytes are."""
    with connect(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        for i in range(150):  # the head would never end
            sock.sendall(b"X-Filler-%03d: v\r\n" % i)
            if select.select([sock], [], [], 0.02)[0]:
                break
        status, headers, answer = Reader(sock).response()
    assert 99 <= i < 149 and status == 431 and headers["connection"] == "close"
    assert b"100 fields" in answer


def test_too_many_header_lines_then_a_bad_one_answer_431_not_400(server: Running) -> None:
    """A head past the line limit is refused for it even when a malformed line follows
    in the same read: the answer does not depend on where the reads split."""
    many = "".join(f"X-Filler-{i}: v\r\n" for i in range(120))
    with connect(server) as sock:
        sock.sendall(f"GET /v2 HTTP/1.1\r\nHost: x\r\n{many}Bad Line\r\n\r\n".encode())
        status, headers, _ = Reader(sock).response()
    assert status == 431 and headers["connection"] == "close"
    with connect(server) as sock:
        sock.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nBad Line\r\n\r\n")
        assert Reader(sock).response()[0] == 400
