"""Bounded memory per connection and fairness between client addresses, against
real servers with raw sockets: a client that never reads its answers, one address
that tries to fill the connection cap with bodies dripped a byte at a time, one
that sends too fast, and a gRPC client that never reads (HTTP/2 flow control)."""

from __future__ import annotations

import asyncio
import gzip
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import uvloop
from tritonclient.grpc import service_pb2

from mlserve.core.settings import FaceSettings
from mlserve.core.sockets import bind_socket
from mlserve.http.clients import RateBucket
from mlserve.http.server import HTTPServer
from tests.http.secure_fn import serving_function
from tests.http.test_limits import INFER, SECURE_FN, read_answer, status_of
from tests.netserver import start_server
from tests.services import free_port

HOSTILE = "127.0.0.2"  # another loopback address: another client to the server
_DATA = [i % 1000 for i in range(150_000)]  # ~7 KiB gzipped, a ~600 KiB answer
_BODY = gzip.compress(
    json.dumps(
        {"inputs": [{"name": "x", "datatype": "INT64", "shape": [len(_DATA)], "data": _DATA}]}
    ).encode()
)
GZIP_ECHO = (
    b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
)
PIPELINED = 40


def connect(port: int, source: str = "127.0.0.1", rcvbuf: int = 0) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:  # set before connecting: the window the client offers stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def send_unread(sock: socket.socket, data: bytes, seconds: float = 1.0) -> None:
    """Send what the server takes of ``data`` until it takes nothing for ``seconds``;
    read nothing."""
    view = memoryview(data)
    while view:
        _, writable, _ = select.select([], [sock], [], seconds)
        if not writable:
            return
        view = view[sock.send(view[:65536]) :]


def read_answers(sock: socket.socket, count: int) -> list[int]:
    """The statuses of up to ``count`` answers, until the server stops sending or cuts."""
    statuses: list[int] = []
    data = b""
    try:
        while len(statuses) < count:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                head = data[:head_end].lower()
                length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
                if len(data) >= head_end + 4 + length:
                    statuses.append(status_of(data))
                    data = data[head_end + 4 + length :]
                    continue
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return statuses


class InProcess:
    """An HTTPServer with ``settings`` on a uvloop loop in a thread, on a free port,
    so a test can look at its connections."""

    def __init__(self, settings: FaceSettings) -> None:
        self.http = HTTPServer(serving_function().to_mock_server(), settings)
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

    def connections(self) -> list[tuple[int, int, bool]]:
        """(unread bytes, queued requests, waiting) of each connection, read on its loop."""

        async def look() -> list[tuple[int, int, bool]]:
            return [
                (conn.transport.get_write_buffer_size(), len(conn.queue), conn.waiting)
                for conn in self.http.connections
            ]

        return asyncio.run_coroutine_threadsafe(look(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.http.shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def bounded() -> Iterator[InProcess]:
    running = InProcess(FaceSettings(write_buffer_bytes=64 * 1024, write_timeout=60))
    yield running
    running.stop()


def test_a_client_that_never_reads_holds_the_bound_and_one_answer(bounded: InProcess) -> None:
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
    reply = httpx.post(
        f"http://127.0.0.1:{bounded.port}/v2/models/echo/infer", content=_BODY, headers=headers
    )
    answer = len(reply.content) + 512  # one answer, read, with its head
    with connect(bounded.port, rcvbuf=4096) as sock:
        send_unread(sock, GZIP_ECHO * PIPELINED)
        deadline = time.monotonic() + 20
        while not any(waiting for _, _, waiting in bounded.connections()):
            assert time.monotonic() < deadline, bounded.connections()
            time.sleep(0.1)
        time.sleep(0.5)  # were it to go on answering, more would pile up meanwhile
        [(unread, queued, _)] = bounded.connections()
        assert unread <= 64 * 1024 + answer  # the bound and one answer
        assert queued > 0  # the rest waits, unanswered, for the client to read
        # once it reads, it gets every answer, in order
        assert read_answers(sock, PIPELINED) == [200] * PIPELINED


def test_unread_answers_are_cut_after_the_write_timeout() -> None:
    server = start_server("--write-buffer-size", "65536", "--write-timeout", "1", target=SECURE_FN)
    try:
        with connect(server.port, rcvbuf=4096) as sock:
            send_unread(sock, GZIP_ECHO * PIPELINED)
            time.sleep(3.5)  # past the write timeout (the sweep runs every half of it)
            assert len(read_answers(sock, PIPELINED)) < PIPELINED  # cut: the rest never came
        assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
    finally:
        assert server.stop() == 0


def test_a_stop_does_not_wait_the_drain_for_a_client_that_never_reads() -> None:
    server = start_server("--write-timeout", "120", "--drain-timeout", "120", target=SECURE_FN)
    with connect(server.port, rcvbuf=4096) as sock:
        send_unread(sock, GZIP_ECHO * PIPELINED)
        # cut once a sweep sees it not reading, not after 120 s (stop kills after 30: -9)
        assert server.stop() == 0


def test_one_address_cannot_fill_the_connection_cap_and_dripped_bodies_time_out() -> None:
    server = start_server(
        "--max-connections",
        "64",
        "--max-connections-per-client",
        "16",
        "--body-timeout",
        "2",
        target=SECURE_FN,
    )
    hostile: list[socket.socket] = []
    try:
        for _ in range(100):  # more than the whole cap, from one address
            sock = connect(server.port, HOSTILE)
            try:
                sock.sendall(
                    b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
                )
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the head went out
            hostile.append(sock)
        time.sleep(0.3)
        reply = httpx.post(f"{server.url}/v2/models/echo/infer", json=INFER)
        assert reply.status_code == 200  # another address is served
        assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
        for _ in range(8):  # a byte every half second: never idle, never done
            for sock in hostile:
                try:
                    sock.send(b" ")
                except OSError:
                    pass
            time.sleep(0.5)
        answers = []
        for sock in hostile:
            try:
                answers.append(read_answer(sock))
            except ConnectionResetError:
                answers.append(b"reset")
        statuses = [status_of(answer) if answer.startswith(b"HTTP") else 0 for answer in answers]
        assert statuses.count(429) == 100 - 16, answers[:3]
        assert statuses.count(408) == 16  # past the body timeout, however it drips
        timed_out = next(answer for answer in answers if answer.startswith(b"HTTP/1.1 408"))
        assert b"connection: close" in timed_out.lower()
        refused = next(answer for answer in answers if answer.startswith(b"HTTP/1.1 429"))
        assert b"retry-after: 1" in refused.lower()
    finally:
        for sock in hostile:
            sock.close()
        assert server.stop() == 0


def test_a_request_rate_per_address_answers_429_with_retry_after() -> None:
    server = start_server("--max-client-rate", "5", target=SECURE_FN)
    try:
        with connect(server.port) as sock:  # 30 at once: read together, at one time
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" * 30)
            statuses = read_answers(sock, 30)
        assert statuses == [200] * 5 + [429] * 25  # the burst is a second's worth
        with connect(server.port) as sock:  # the same address: the same bucket, empty
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            refused = read_answer(sock)
        assert status_of(refused) == 429 and b"retry-after: 1\r\n" in refused.lower()
        other = httpx.HTTPTransport(local_address=HOSTILE)
        with httpx.Client(transport=other) as elsewhere:  # another address: its own bucket
            assert elsewhere.get(f"{server.url}/v2/health/live").status_code == 200
        time.sleep(1.0)  # five more have come back
        with httpx.Client() as client:
            assert client.get(f"{server.url}/v2/health/live").status_code == 200
    finally:
        assert server.stop() == 0


def test_rate_bucket_refills_at_its_rate_up_to_one_second() -> None:
    bucket = RateBucket(2.0, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.5]
    assert bucket.take(0.5) == 0.0
    assert bucket.take(100.0) == 0.0 and bucket.take(100.0) == 0.0 and bucket.take(100.0) > 0
    slow = RateBucket(0.5, now=0.0)  # under one a second: a burst of one
    assert slow.take(0.0) == 0.0 and slow.take(0.0) == 2.0
    assert not slow.full(1.0) and slow.full(2.0)


def test_the_per_client_cap_defaults_to_an_eighth_of_the_cap() -> None:
    assert FaceSettings().max_connections_per_client == 2048 // 8
    assert FaceSettings(max_connections=64).max_connections_per_client == 8
    assert FaceSettings(max_connections=4).max_connections_per_client == 1
    assert FaceSettings(max_connections_per_client=500).max_connections_per_client == 500


# ---- gRPC: a client that opens calls and never reads their answers -----------------

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA_FRAME, _HEADERS, _RST_STREAM, _SETTINGS = 0x0, 0x1, 0x3, 0x4
_REFUSED_STREAM = 0x7
_MAX_CONCURRENT_STREAMS, _INITIAL_WINDOW_SIZE = 0x3, 0x4


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK header field, literal and not indexed (short names and values)."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _read_frames(sock: socket.socket, seconds: float) -> list[tuple[int, int, bytes]]:
    """(type, stream, payload) of the frames the server sends within ``seconds``."""
    sock.settimeout(0.2)
    data, frames = b"", []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            break
        data += chunk
        while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
            size = int.from_bytes(data[:3], "big")
            stream = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
            frames.append((data[3], stream, data[9 : 9 + size]))
            data = data[9 + size :]
    return frames


def _infer_stream(stream: int) -> bytes:
    """A ModelInfer call of a 4 KiB tensor on ``stream``, its request sent whole."""
    tensor = np.zeros(1024, dtype=np.float32)
    request = service_pb2.ModelInferRequest(
        model_name="echo",
        inputs=[service_pb2.ModelInferRequest.InferInputTensor(
            name="x", datatype="FP32", shape=[1024]
        )],
        raw_input_contents=[tensor.tobytes()],
    ).SerializeToString()  # fmt: skip
    head = b"".join(
        _literal(name, value)
        for name, value in (
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
            (b":authority", b"127.0.0.1"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        )
    )
    message = b"\x00" + len(request).to_bytes(4, "big") + request
    return _frame(_HEADERS, 0x4, stream, head) + _frame(_DATA_FRAME, 0x1, stream, message)


def test_a_grpc_client_that_never_reads_holds_at_most_the_stream_cap() -> None:
    server = start_server(target=SECURE_FN)
    try:
        with socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10) as sock:
            # a window of 0: the server may send no answer's data, ever
            sock.sendall(
                _PREFACE + _frame(_SETTINGS, 0, 0, struct.pack(">HI", _INITIAL_WINDOW_SIZE, 0))
            )
            settings: dict[int, int] = {}
            for kind, _, payload in _read_frames(sock, 0.5):
                if kind == _SETTINGS and payload:
                    for at in range(0, len(payload), 6):
                        key, value = struct.unpack(">HI", payload[at : at + 6])
                        settings[key] = value
            assert settings[_MAX_CONCURRENT_STREAMS] == 100
            sock.sendall(_frame(_SETTINGS, 0x1, 0))  # acknowledged: the cap applies
            frames: list[tuple[int, int, bytes]] = []
            for call in range(150):
                sock.sendall(_infer_stream(2 * call + 1))
                if call % 10 == 9:  # read as it goes, so the server's writes never block
                    frames += _read_frames(sock, 0.1)
            frames += _read_frames(sock, 2.0)
            refused = [
                stream
                for kind, stream, payload in frames
                if kind == _RST_STREAM and int.from_bytes(payload, "big") == _REFUSED_STREAM
            ]
            assert len(refused) == 50  # the calls past the first 100 are refused
            assert not [frame for frame in frames if frame[0] == _DATA_FRAME]  # nothing read
            # meanwhile another client is served
            client = grpcclient.InferenceServerClient(server.grpc_address)
            tensor = grpcclient.InferInput("x", [4], "FP32")
            tensor.set_data_from_numpy(np.ones(4, dtype=np.float32))
            np.testing.assert_array_equal(client.infer("echo", [tensor]).as_numpy("x"), np.ones(4))
    finally:
        assert server.stop() == 0
