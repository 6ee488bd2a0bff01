"""TLS and mutual TLS on both HTTP faces (docs/security.md#tls): real servers of
tests/http/fn.py with certificates the tests make, asked by urllib, httpx and
tritonclient.http. A plaintext client and a client without a certificate are
refused at the handshake, and the server goes on serving; a bad file ends
``mlserve serve`` with one line and exit status 2."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent.ssl
import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from mlserve.core.tls import TLSError, TLSSettings
from tests.netserver import FN, ROOT, ServerProcess, start_server
from tests.services import free_port
from tests.tls_certs import Certificates, make_certificates

FACES = ["mlserve", "asgi"]
BODY = b'{"inputs": [{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]}]}'


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


def _flags(certs: Certificates, mutual: bool) -> list[str]:
    flags = ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]
    return flags + (["--ssl-ca-certs", str(certs.ca)] if mutual else [])


@pytest.fixture(scope="module", params=FACES)
def tls_server(
    request: pytest.FixtureRequest, certs: Certificates
) -> Iterator[tuple[ServerProcess, Any]]:
    """A TLS server of one face, and its log (stderr)."""
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    server = start_server("--http", request.param, *_flags(certs, False), stderr=log)
    yield server, log
    server.stop()
    log.close()


@pytest.fixture(scope="module", params=FACES)
def mtls_server(request: pytest.FixtureRequest, certs: Certificates) -> Iterator[ServerProcess]:
    server = start_server("--http", request.param, *_flags(certs, True))
    yield server
    server.stop()


def https(server: ServerProcess, host: str = "127.0.0.1") -> str:
    return f"https://{host}:{server.port}"


def get(url: str, context: ssl.SSLContext | None = None, data: bytes | None = None) -> Any:
    """(status, body) of a request (no proxy: loopback); ``data`` posts JSON."""
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers)
    handlers = [urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)]
    with urllib.request.build_opener(*handlers).open(request, timeout=30) as answer:
        return answer.status, answer.read()


def refused(url: str, context: ssl.SSLContext | None = None) -> BaseException:
    """The error of a request the server refuses at the handshake (or of a plaintext one)."""
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)) as err:
        get(url, context)
    error: BaseException = err.value
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, BaseException) else error
    assert isinstance(error, ssl.SSLError | ConnectionError | http.client.HTTPException), error
    return error


def handshake(port: int, context: ssl.SSLContext) -> None:
    """A TLS handshake with the server on ``port``, and nothing more."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        context.wrap_socket(raw, server_hostname="localhost").close()


def test_health_metrics_and_inference_over_tls(
    tls_server: tuple[ServerProcess, Any], certs: Certificates
) -> None:
    server, _ = tls_server
    context = certs.client_context()
    for host in ("127.0.0.1", "localhost"):  # both names of the certificate
        assert get(f"{https(server, host)}/v2/health/live", context)[0] == 200
    assert get(f"{https(server)}/v2/health/ready", context)[0] == 200
    status, body = get(f"{https(server)}/v2/models/echo/infer", context, BODY)
    assert status == 200 and b'"data":[1,2]' in body.replace(b" ", b"")
    status, metrics = get(f"{https(server)}/metrics", context)
    assert status == 200 and b"mlserve_model_requests_total" in metrics


def test_a_client_that_does_not_trust_the_ca_refuses_the_certificate(
    tls_server: tuple[ServerProcess, Any],
) -> None:
    error = refused(f"{https(tls_server[0])}/v2/health/live", ssl.create_default_context())
    assert isinstance(error, ssl.SSLCertVerificationError)


def test_a_plaintext_client_fails_cleanly_and_the_server_keeps_serving(
    tls_server: tuple[ServerProcess, Any], certs: Certificates
) -> None:
    server, log = tls_server
    refused(f"http://127.0.0.1:{server.port}/v2/health/live")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = sock.recv(4096)  # nothing, or a TLS alert: never an HTTP answer
    assert not answer.startswith(b"HTTP/")
    assert get(f"{https(server)}/v2/health/live", certs.client_context())[0] == 200
    assert server.proc.poll() is None
    time.sleep(0.2)  # what the refusals logged, if anything
    log.seek(0)
    assert b"Traceback" not in log.read()


def test_a_handshake_never_begun_is_dropped_after_the_header_timeout(
    certs: Certificates,
) -> None:
    """A connection that never starts its handshake is not yet a connection the
    server counts: the default face drops it after ``--header-timeout`` (not
    asyncio's 60 s)."""
    server = start_server("--header-timeout", "0.5", *_flags(certs, False))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            assert sock.recv(1) == b""  # closed, well before the socket's timeout
        assert get(f"{https(server)}/v2/health/live", certs.client_context())[0] == 200
    finally:
        server.stop()


def test_tritonclient_http_over_tls(
    tls_server: tuple[ServerProcess, Any], certs: Certificates
) -> None:
    client = httpclient.InferenceServerClient(
        tls_server[0].address,
        ssl=True,
        ssl_context_factory=lambda: gevent.ssl.create_default_context(cafile=str(certs.ca)),
        insecure=False,
    )
    try:
        assert client.is_server_live() and client.is_server_ready()
        tensor = httpclient.InferInput("x", [2, 2], "FP32")
        x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
        tensor.set_data_from_numpy(x, binary_data=True)
        result = client.infer("scale", [tensor])
        np.testing.assert_allclose(result.as_numpy("scaled"), x * 3)
    finally:
        client.close()


def test_mtls_refuses_a_client_without_a_certificate_or_with_a_strangers(
    mtls_server: ServerProcess, certs: Certificates
) -> None:
    url = f"{https(mtls_server)}/v2/health/live"
    refused(url, certs.client_context())
    stranger = certs.client_context()
    stranger.load_cert_chain(certs.stranger_cert, certs.stranger_key)
    refused(url, stranger)
    assert get(url, certs.client_context(with_certificate=True))[0] == 200
    for with_certificate in (False, True):  # TLS 1.2: the server checks during the handshake
        context = certs.client_context(with_certificate)
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        if with_certificate:
            handshake(mtls_server.port, context)
        else:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                handshake(mtls_server.port, context)
    assert mtls_server.proc.poll() is None


def test_mtls_serves_a_client_with_its_certificate(
    mtls_server: ServerProcess, certs: Certificates
) -> None:
    context = certs.client_context(with_certificate=True)
    status, body = get(f"{https(mtls_server)}/v2/models/echo/infer", context, BODY)
    assert status == 200 and b'"data":[1,2]' in body.replace(b" ", b"")
    assert get(f"{https(mtls_server)}/metrics", context)[0] == 200

    def gevent_context() -> Any:
        made = gevent.ssl.create_default_context(cafile=str(certs.ca))
        made.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        return made

    client = httpclient.InferenceServerClient(
        mtls_server.address, ssl=True, ssl_context_factory=gevent_context
    )
    try:
        assert client.is_server_ready()
        tensor = httpclient.InferInput("t", [3], "INT64")
        tensor.set_data_from_numpy(np.array([4, 5, 6], dtype=np.int64))
        assert client.infer("echo", [tensor]).as_numpy("t").tolist() == [4, 5, 6]
    finally:
        client.close()


def test_workers_serve_tls_from_the_environment(certs: Certificates) -> None:
    """``--workers 2`` re-runs the command line: each worker serves TLS (here from the
    ``MLSERVE_SSL_*`` variables, which every worker inherits)."""
    port = free_port()
    env = {
        **os.environ,
        "MLSERVE_SSL_CERTFILE": str(certs.server_cert),
        "MLSERVE_SSL_KEYFILE": str(certs.server_key),
    }
    command = [sys.executable, "-m", "mlserve", "serve", FN, "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        pids: set[int] = set()
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:  # both workers serve TLS
            try:
                with httpx.Client(verify=certs.client_context(), timeout=60) as client:
                    answer = client.post(f"https://127.0.0.1:{port}/v2/models/where/pid", json={})
                    pids.add(answer.json()["pid"])
            except httpx.TransportError:
                time.sleep(0.1)
        assert len(pids) == 2
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=30)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert f"on https://127.0.0.1:{port} (TLS on every port)" in out


def _bad_files(certs: Certificates, tmp: Path) -> list[tuple[list[str], dict[str, str], str]]:
    junk = tmp / "junk.pem"
    junk.write_text("not a certificate\n")
    return [
        (["--ssl-certfile", str(tmp / "missing.crt")], {}, "missing.crt: no such file"),
        (
            ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.client_key)],
            {},
            "client.key is not the key of --ssl-certfile",
        ),
        (_flags(certs, False) + ["--ssl-ca-certs", str(junk)], {}, "no PEM CA certificate"),
        ([], {"MLSERVE_SSL_KEYFILE": str(certs.server_key)}, "needs --ssl-certfile"),
    ]


def test_a_bad_or_missing_file_is_one_line_and_exit_2(certs: Certificates, tmp_path: Path) -> None:
    port = free_port()
    for flags, env, said in _bad_files(certs, tmp_path):
        command = [sys.executable, "-m", "mlserve", "serve", FN, "--port", str(port), *flags]
        done = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("mlserve: ") and done.stderr.count("\n") == 1, done.stderr
        assert said in done.stderr
        assert done.stdout == ""  # no model loaded, nothing served


def test_a_local_deploy_serves_plain_http_whatever_the_environment_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``fn.deploy()`` asks its server over plain HTTP on loopback: TLS variables the
    notebook's environment holds do not reach that server."""
    import mlserve
    from tests.http.fn import Echo

    monkeypatch.setenv("MLSERVE_SSL_CERTFILE", str(tmp_path / "missing.crt"))
    fn = mlserve.new_function("plain-deploy")
    fn.add_model("echo", class_name=Echo)
    url = fn.deploy(timeout=60)
    try:
        assert url.startswith("http://")
        assert get(f"{url}/v2/health/ready")[0] == 200
    finally:
        fn.stop()


def test_each_bad_file_is_named_with_what_is_wrong_with_it(
    certs: Certificates, tmp_path: Path
) -> None:
    """The one line ``mlserve serve`` prints, for each way a file can be wrong."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(certs.server_key.read_bytes(), None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    junk = tmp_path / "junk.pem"
    junk.write_text("not PEM\n")
    cert, server_key, ca = str(certs.server_cert), str(certs.server_key), str(certs.ca)
    cases = {
        (cert, str(encrypted), ""): "encrypted.key: the private key is encrypted",
        (cert, "", ""): "server.crt holds no private key: give --ssl-keyfile",
        (cert, str(junk), ""): "junk.pem: no PEM private key in it",
        (str(junk), server_key, ""): "junk.pem: no PEM certificate in it",
        (str(tmp_path), server_key, ""): f"{tmp_path}: not a file",
        (cert, server_key, server_key): "server.key: no PEM CA certificate in it",
        ("", "", ca): "--ssl-ca-certs (MLSERVE_SSL_CA_CERTS) needs --ssl-certfile",
    }
    for (certfile, keyfile, ca_certs), said in cases.items():
        with pytest.raises(TLSError) as caught:
            TLSSettings(certfile, keyfile, ca_certs).check()
        assert said in str(caught.value) and "\n" not in str(caught.value), caught.value
    both = tmp_path / "both.pem"  # the key after the certificate, in one file
    both.write_bytes(certs.server_cert.read_bytes() + certs.server_key.read_bytes())
    TLSSettings(str(both)).check()
    TLSSettings().check()  # no TLS: nothing to check


def test_a_flag_wins_over_its_variable() -> None:
    env = {"MLSERVE_SSL_CERTFILE": "env.crt", "MLSERVE_SSL_CA_CERTS": "env-ca.crt"}
    settings = TLSSettings.from_env(env, certfile="flag.crt", keyfile=None, ca_certs=None)
    assert settings == TLSSettings("flag.crt", "", "env-ca.crt")
    assert settings.enabled and settings.mutual
    assert not TLSSettings.from_env({}).enabled
