"""Authentication and model control against real servers: both HTTP faces,
gRPC (tritonclient), tokens from flags and from the environment."""

from __future__ import annotations

import base64
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, start_server

TOKEN, OTHER, ADMIN = "tok-3f9a1c", "tok-second-77", "adm-0b5e2d"
SECURE_FN = "tests/http/secure_fn.py"
INFER = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]}]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module", params=["mlserve", "asgi"])
def secured(request: pytest.FixtureRequest) -> Iterator[tuple[ServerProcess, str]]:
    """A server with two user tokens (repeated flag), an admin token (env), a basic user,
    explicit model control; its log is kept to check that no token is in it."""
    log = tempfile.NamedTemporaryFile(suffix=".log")  # noqa: SIM115 - closed below
    server = start_server(
        "--http",
        request.param,
        "--auth-token",
        TOKEN,
        "--auth-token",
        OTHER,
        "--basic-auth",
        "ann:s3cret",
        "--model-control-mode",
        "explicit",
        target=SECURE_FN,
        env={"MLSERVE_ADMIN_TOKEN": ADMIN},
        stderr=log,
    )
    yield server, log.name
    assert server.stop() == 0
    log.close()


def test_requests_without_valid_credentials_get_401_with_a_challenge(
    secured: tuple[ServerProcess, str],
) -> None:
    server, _ = secured
    for headers in ({}, bearer("wrong"), {"Authorization": "Basic !!"}, {"Authorization": "x"}):
        reply = httpx.post(f"{server.url}/v2/models/echo/infer", json=INFER, headers=headers)
        assert reply.status_code == 401, headers
        assert "Bearer" in reply.headers["www-authenticate"]
        assert "Basic" in reply.headers["www-authenticate"]
    for path in ("/v2/models/echo", "/v2", "/metrics", "/v1/models/echo", "/v2/models/stats"):
        assert httpx.get(server.url + path).status_code == 401, path


def test_every_configured_credential_passes(secured: tuple[ServerProcess, str]) -> None:
    server, _ = secured
    basic = "Basic " + base64.b64encode(b"ann:s3cret").decode()
    for headers in (bearer(TOKEN), bearer(OTHER), bearer(ADMIN), {"Authorization": basic}):
        reply = httpx.post(f"{server.url}/v2/models/echo/infer", json=INFER, headers=headers)
        assert reply.status_code == 200, headers
        assert reply.json()["outputs"][0]["data"] == [1, 2]
    wrong_password = "Basic " + base64.b64encode(b"ann:guess").decode()
    reply = httpx.get(f"{server.url}/v2", headers={"Authorization": wrong_password})
    assert reply.status_code == 401


def test_liveness_and_readiness_need_no_credentials_by_default(
    secured: tuple[ServerProcess, str],
) -> None:
    server, _ = secured
    assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
    assert httpx.get(f"{server.url}/v2/health/ready").status_code == 200


def test_load_and_unload_need_an_admin_token(secured: tuple[ServerProcess, str]) -> None:
    server, _ = secured
    unload = f"{server.url}/v2/repository/models/echo/unload"
    assert httpx.post(unload).status_code == 401
    assert httpx.post(unload, headers=bearer(TOKEN)).status_code == 403
    assert httpx.post(f"{server.url}/v2/repository/index", headers=bearer(TOKEN)).status_code == 200
    assert httpx.post(unload, headers=bearer(ADMIN)).json() == {"name": "echo", "unload": True}
    load = f"{server.url}/v2/repository/models/echo/load"
    assert httpx.post(load, headers=bearer(ADMIN)).json() == {"name": "echo", "load": True}
    infer = httpx.post(f"{server.url}/v2/models/echo/infer", json=INFER, headers=bearer(TOKEN))
    assert infer.status_code == 200


def test_tokens_never_reach_the_log(secured: tuple[ServerProcess, str]) -> None:
    server, log = secured
    httpx.post(f"{server.url}/v2/models/leaky/infer", json=INFER, headers=bearer(TOKEN))
    httpx.get(f"{server.url}/v2", headers=bearer("a-wrong-token-xyz"))
    with open(log, encoding="utf-8") as file:
        text = file.read()
    assert "RuntimeError" in text  # the log is the server's, and it is written
    for secret in (TOKEN, OTHER, ADMIN, "s3cret", "a-wrong-token-xyz"):
        assert secret not in text


def test_tritonclient_http_with_auth_headers(secured: tuple[ServerProcess, str]) -> None:
    server, _ = secured
    client = httpclient.InferenceServerClient(server.address)
    tensor = httpclient.InferInput("x", [3], "FP32")
    tensor.set_data_from_numpy(np.array([1.5, 2.5, 3.5], dtype=np.float32))
    with pytest.raises(InferenceServerException, match="authentication required"):
        client.infer("echo", [tensor])
    result = client.infer("echo", [tensor], headers=bearer(TOKEN))
    np.testing.assert_array_equal(result.as_numpy("x"), [1.5, 2.5, 3.5])


def test_grpc_calls_need_credentials_in_metadata(secured: tuple[ServerProcess, str]) -> None:
    server, _ = secured
    client = grpcclient.InferenceServerClient(server.grpc_address)
    assert client.is_server_live()  # liveness is open
    assert client.is_server_ready()  # readiness too, by default
    tensor = grpcclient.InferInput("x", [2], "INT32")
    tensor.set_data_from_numpy(np.array([4, 5], dtype=np.int32))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("echo", [tensor])
    assert refused.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException) as wrong:
        client.get_server_metadata(headers={"authorization": "Bearer nope"})
    assert wrong.value.status() == "StatusCode.UNAUTHENTICATED"
    result = client.infer("echo", [tensor], headers={"authorization": f"Bearer {OTHER}"})
    np.testing.assert_array_equal(result.as_numpy("x"), [4, 5])
    basic = "Basic " + base64.b64encode(b"ann:s3cret").decode()
    assert client.get_server_metadata(headers={"authorization": basic}).name == "mlserve"


def test_grpc_load_and_unload_need_an_admin_token(secured: tuple[ServerProcess, str]) -> None:
    server, _ = secured
    client = grpcclient.InferenceServerClient(server.grpc_address)
    user, admin = {"authorization": f"Bearer {TOKEN}"}, {"authorization": f"Bearer {ADMIN}"}
    with pytest.raises(InferenceServerException) as refused:
        client.unload_model("echo", headers=user)
    assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
    assert client.is_model_ready("echo", headers=user)  # the refused unload changed nothing
    client.unload_model("echo", headers=admin)
    assert not client.is_model_ready("echo", headers=user)  # unloaded: known, not ready
    client.load_model("echo", headers=admin)
    assert client.is_model_ready("echo", headers=user)


def test_readiness_can_require_credentials() -> None:
    server = start_server(
        "--auth-readiness", target=SECURE_FN, env={"MLSERVE_AUTH_TOKEN": f"{OTHER}, {TOKEN}"}
    )
    try:
        assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
        assert httpx.get(f"{server.url}/v2/health/ready").status_code == 401
        ready = httpx.get(f"{server.url}/v2/health/ready", headers=bearer(TOKEN))
        assert ready.status_code == 200
        client = grpcclient.InferenceServerClient(server.grpc_address)
        with pytest.raises(InferenceServerException, match="UNAUTHENTICATED|authentication"):
            client.is_server_ready()
        assert client.is_server_ready(headers={"authorization": f"Bearer {TOKEN}"})
    finally:
        assert server.stop() == 0


def test_model_control_is_off_by_default_and_names_stay_in_the_repository() -> None:
    server = start_server(target=SECURE_FN)
    try:
        unload = httpx.post(f"{server.url}/v2/repository/models/echo/unload")
        assert unload.status_code == 403
        assert "model-control-mode" in unload.json()["error"]
        assert httpx.post(f"{server.url}/v2/repository/index").status_code == 200
        for target in (
            "/v2/repository/models/..%2F..%2Fetc/load",
            "/v2/repository/models/a%00b/load",
            "/v2/repository/models/..%5Cwin/load",
            "/v2/repository/models/../load",
            "/v2/models/..%2F..%2Fetc/infer",
            "/v2/models/a%00b/infer",
            "/v2/models/%2Fetc%2Fpasswd",
        ):
            reply = _raw(server.port, f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0")
            assert reply.startswith(b"HTTP/1.1 400"), (target, reply[:80])
    finally:
        assert server.stop() == 0


def test_explicit_model_control_rejects_names_that_leave_the_repository() -> None:
    server = start_server("--model-control-mode", "explicit", target=SECURE_FN)
    try:
        for name in ("~root", ".."):
            request = f"POST /v2/repository/models/{name}/load HTTP/1.1\r\nContent-Length: 0"
            assert _raw(server.port, request).startswith(b"HTTP/1.1 400"), name
        ok = httpx.post(f"{server.url}/v2/repository/models/echo/load")
        assert ok.json() == {"name": "echo", "load": True}
    finally:
        assert server.stop() == 0


def _raw(port: int, head: str) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_cli_rejects_an_unknown_model_control_mode() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mlserve", "serve", SECURE_FN, "--model-control-mode", "poll"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


def test_a_stranger_s_body_is_not_read(secured: tuple[ServerProcess, str]) -> None:
    """Without credentials, a request announcing a body is refused on its head."""
    import socket

    server, _ = secured
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n"
        )
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 401")
    assert b"www-authenticate" in answer.lower()
