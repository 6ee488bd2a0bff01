"""The faces' limits against real servers with raw sockets: body (413 before the
body is read), headers (431), URL (414), head timeout (slowloris), connections,
405 with Allow, Content-Encoding both ways, hidden errors."""

from __future__ import annotations

import gzip
import json
import socket
import tempfile
import time
import zlib
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.http.secure_fn import SECRET
from tests.netserver import ServerProcess, start_server

SECURE_FN = "tests/http/secure_fn.py"
BODY_LIMIT = 1024 * 1024
INFER = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]}]}


@pytest.fixture(scope="module", params=["mlserve", "asgi"])
def limited(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    server = start_server(
        "--http",
        request.param,
        "--max-body-size",
        str(BODY_LIMIT),
        "--max-url-size",
        "4096",
        "--max-header-size",
        "16384",
        "--max-headers",
        "50",
        target=SECURE_FN,
    )
    yield server
    assert server.stop() == 0


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_a_declared_oversized_body_is_refused_before_it_is_sent(limited: ServerProcess) -> None:
    started = time.monotonic()
    with connect(limited.port) as sock:
        sock.sendall(
            b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 10737418240\r\n\r\n"
        )
        answer = read_answer(sock)  # nothing of the 10 GiB was sent: the server answers anyway
    assert status_of(answer) == 413
    assert b"limit" in answer
    assert time.monotonic() - started < 5


def test_a_chunked_body_is_refused_once_it_passes_the_limit(limited: ServerProcess) -> None:
    chunk = b"x" * 65536
    sent = 0
    with connect(limited.port) as sock:
        sock.sendall(
            b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < 64 * BODY_LIMIT:  # far past the limit, if it were never answered
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = b""
        try:
            answer = read_answer(sock)
        except ConnectionResetError:
            pass
    assert sent < 16 * BODY_LIMIT
    if answer:  # a reset may beat the answer to the client; the stop is what matters
        assert status_of(answer) == 413


def test_bodies_within_the_limit_are_served(limited: ServerProcess) -> None:
    data = list(range(20000))
    body = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [len(data)], "data": data}]}
    reply = httpx.post(f"{limited.url}/v2/models/echo/infer", json=body)
    assert reply.status_code == 200
    assert reply.json()["outputs"][0]["data"] == data


def test_oversized_urls_and_headers_answer_414_and_431(limited: ServerProcess) -> None:
    long_url = "/v2/models/echo?" + "a" * 8000
    assert httpx.get(limited.url + long_url).status_code == 414
    assert httpx.get(f"{limited.url}/v2", headers={"x-big": "v" * 20000}).status_code == 431
    many = {f"x-h{i}": "1" for i in range(80)}
    assert httpx.get(f"{limited.url}/v2", headers=many).status_code == 431
    assert httpx.get(f"{limited.url}/v2", headers={"x-ok": "v" * 1000}).status_code == 200


def test_megabyte_headers_are_refused_without_reading_them_all() -> None:
    server = start_server(target=SECURE_FN)  # the default limits
    try:
        for head in (
            b"GET /v2 HTTP/1.1\r\nX-Big: " + b"v" * (2 * 1024 * 1024) + b"\r\n\r\n",
            b"GET /v2 HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100000)),
            b"GET /v2/" + b"a" * (2 * 1024 * 1024) + b" HTTP/1.1\r\n\r\n",
        ):
            with connect(server.port) as sock:
                try:
                    sock.sendall(head)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server answered and closed while we were still sending
                try:
                    answer = read_answer(sock)
                except ConnectionResetError:
                    answer = b""
            if answer:
                assert status_of(answer) in (414, 431), answer[:60]
        assert httpx.get(f"{server.url}/v2").status_code == 200
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v2/models/echo/infer"),
        ("PUT", "/v2/models/echo/infer"),
        ("PATCH", "/v2/models/echo/infer"),
        ("OPTIONS", "/v2/models/echo/infer"),
        ("GET", "/v2/models/echo/infer"),
        ("DELETE", "/v1/models/echo:predict"),
        ("PUT", "/v1/models/echo:predict"),
        ("PATCH", "/v1/models/echo:predict"),
        ("GET", "/v1/models/echo:predict"),
        ("TRACE", "/v1/models/echo:predict"),
    ],
)
def test_wrong_methods_answer_405_with_allow(
    limited: ServerProcess, method: str, path: str
) -> None:
    reply = httpx.request(method, limited.url + path, content=json.dumps(INFER))
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"


def test_head_answers_where_get_does(limited: ServerProcess) -> None:
    for path in ("/v2", "/v2/health/live", "/v2/models/echo", "/openapi.json"):
        get = httpx.get(limited.url + path)
        head = httpx.head(limited.url + path)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b""


def test_compressed_requests_are_decoded_and_bounded(limited: ServerProcess) -> None:
    url = f"{limited.url}/v2/models/echo/infer"
    raw = json.dumps(INFER).encode()
    for encoding, data in (("gzip", gzip.compress(raw)), ("deflate", zlib.compress(raw))):
        headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
        reply = httpx.post(url, content=data, headers=headers)
        assert reply.status_code == 200, encoding
        assert reply.json()["outputs"][0]["data"] == [1, 2]
    bomb = gzip.compress(b"[" + b" " * (64 * BODY_LIMIT) + b"]")  # 64 MiB inflated, ~64 KiB sent
    assert len(bomb) < BODY_LIMIT
    reply = httpx.post(url, content=bomb, headers={"Content-Encoding": "gzip"})
    assert reply.status_code == 413
    reply = httpx.post(url, content=raw, headers={"Content-Encoding": "br"})
    assert reply.status_code == 415
    reply = httpx.post(url, content=b"not gzip", headers={"Content-Encoding": "gzip"})
    assert reply.status_code == 400


def test_responses_are_compressed_when_asked(limited: ServerProcess) -> None:
    for encoding in ("gzip", "deflate"):
        with httpx.Client() as client:
            request = client.build_request(
                "POST",
                f"{limited.url}/v2/models/echo/infer",
                json=INFER,
                headers={"Accept-Encoding": encoding},
            )
            reply = client.send(request, stream=True)
            body = reply.read()  # httpx decodes: read the wire bytes through raw
            assert reply.headers["content-encoding"] == encoding
            assert json.loads(body)["outputs"][0]["data"] == [1, 2]
            reply.close()
        with httpx.Client() as client:
            request = client.build_request(
                "POST",
                f"{limited.url}/v2/models/missing/infer",
                json=INFER,
                headers={"Accept-Encoding": encoding},
            )
            reply = client.send(request)
            assert reply.status_code == 404
            assert "content-encoding" not in reply.headers  # an error stays plain, as Triton's
        with connect(limited.port) as sock:  # any other route: plain, as Triton answers
            sock.sendall(
                b"GET /v2 HTTP/1.1\r\nHost: x\r\nAccept-Encoding: %s\r\nConnection: close\r\n\r\n"
                % encoding.encode()
            )
            answer = read_answer(sock)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"content-encoding" not in head.lower()
        assert json.loads(body)["name"] == "mlserve"


def test_tritonclient_compression_both_ways(limited: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(limited.address)
    array = np.arange(1000, dtype=np.float32).reshape(10, 100)
    for binary in (False, True):
        for algorithm in ("gzip", "deflate"):
            tensor = httpclient.InferInput("x", list(array.shape), "FP32")
            tensor.set_data_from_numpy(array, binary_data=binary)
            result = client.infer(
                "echo",
                [tensor],
                request_compression_algorithm=algorithm,
                response_compression_algorithm=algorithm,
            )
            np.testing.assert_array_equal(result.as_numpy("x"), array)


def test_slowloris_does_not_delay_a_normal_request_and_drips_get_closed() -> None:
    server = start_server("--header-timeout", "2", target=SECURE_FN)
    drips: list[socket.socket] = []
    try:
        for _ in range(200):
            sock = connect(server.port)
            sock.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n")
            drips.append(sock)
        for sock in drips:
            sock.sendall(b"X-a: b\r\n")  # one header line at a time
        started = time.monotonic()
        reply = httpx.post(f"{server.url}/v2/models/echo/infer", json=INFER)
        assert reply.status_code == 200
        assert time.monotonic() - started < 0.5
        time.sleep(3.5)  # past the header timeout (the sweep runs every second or less)
        closed = 0
        for sock in drips:
            try:
                sock.sendall(b"X-c: d\r\n")
                sock.settimeout(5)
                answer = read_answer(sock)
                closed += answer == b"" or answer.startswith(b"HTTP/1.1 408")
            except (BrokenPipeError, ConnectionResetError):
                closed += 1
        assert closed == len(drips)
    finally:
        for sock in drips:
            sock.close()
        assert server.stop() == 0


def test_connections_past_the_maximum_are_refused() -> None:
    # one client may hold them all here (by default it holds an eighth: test_fairness.py)
    server = start_server(
        "--max-connections", "5", "--max-connections-per-client", "5", target=SECURE_FN
    )
    held = [connect(server.port) for _ in range(5)]
    try:
        time.sleep(0.3)
        with connect(server.port) as extra:
            assert status_of(read_answer(extra)) == 503
        for sock in held:
            sock.close()
        held = []
        time.sleep(0.3)
        assert httpx.get(f"{server.url}/v2").status_code == 200
    finally:
        for sock in held:
            sock.close()
        assert server.stop() == 0


@pytest.mark.parametrize("face", ["mlserve", "asgi"])
def test_hidden_errors_give_an_id_that_is_in_the_log(face: str) -> None:
    with tempfile.TemporaryFile() as log:
        server = start_server("--http", face, "--hide-errors", target=SECURE_FN, stderr=log)
        try:
            reply = httpx.post(f"{server.url}/v2/models/leaky/infer", json=INFER)
            missing = httpx.post(f"{server.url}/v2/models/nope/infer", json=INFER)
        finally:
            assert server.stop() == 0
        log.seek(0)
        text = log.read().decode()
    assert reply.status_code == 500
    error = reply.json()["error"]
    assert SECRET not in error and "RuntimeError" not in error
    error_id = error.rsplit(" ", 1)[1]
    assert len(error_id) == 16
    assert f"error id {error_id}" in text and SECRET in text  # the log keeps the whole story
    assert missing.status_code == 404
    assert "echo" not in missing.json()["error"] and "leaky" not in missing.json()["error"]


def test_404s_never_list_the_served_models(limited: ServerProcess) -> None:
    for path in ("/v2/models/nope/infer", "/v2/models/nope/versions/3/infer"):
        reply = httpx.post(limited.url + path, json=INFER)
        assert reply.status_code == 404
        assert "echo" not in reply.text and "leaky" not in reply.text
    assert "leaky" not in httpx.get(f"{limited.url}/v2/models/nope").text


def test_grpc_messages_past_the_body_limit_are_refused(limited: ServerProcess) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(limited.grpc_address)
    big = grpcclient.InferInput("x", [2 * BODY_LIMIT // 4], "FP32")
    big.set_data_from_numpy(np.zeros(2 * BODY_LIMIT // 4, dtype=np.float32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("echo", [big])
    assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    small = grpcclient.InferInput("x", [4], "FP32")
    small.set_data_from_numpy(np.ones(4, dtype=np.float32))
    np.testing.assert_array_equal(client.infer("echo", [small]).as_numpy("x"), np.ones(4))


def test_idle_and_stalled_connections_are_closed_after_the_keep_alive_timeout() -> None:
    server = start_server("--keep-alive-timeout", "1", target=SECURE_FN)
    try:
        with connect(server.port) as idle, connect(server.port) as stalled:
            stalled.sendall(
                b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
            )
            started = time.monotonic()
            assert read_answer(idle) == b""  # closed, nothing said
            assert read_answer(stalled) == b""
            assert time.monotonic() - started < 4
    finally:
        assert server.stop() == 0
