"""Server-side limits on a real ``mlserve serve`` process (docs/security.md#limits): per-model
concurrency, 429 with Retry-After, request timeout, graceful stop."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.netserver import start_server

SLOW = "/v2/models/sleepy/infer"
FAST = "/v2/models/echo/infer"
ECHO_BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


def _client(url: str) -> httpx.Client:
    return httpx.Client(
        base_url=url,
        timeout=60,
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=200),
    )


def _sleep(http: httpx.Client, seconds: float) -> httpx.Response:
    return http.post(SLOW, json={"inputs": [seconds]})


def test_forty_slow_calls_do_not_delay_a_fast_model() -> None:
    """The issue's case: 40 concurrent calls to a model that sleeps (4 s here, more
    than the default 32 threads of a model) and a call to an unrelated model."""
    server = start_server()
    try:
        with _client(server.url) as http, ThreadPoolExecutor(40) as pool:
            http.post(FAST, json=ECHO_BODY).raise_for_status()  # warm
            started = time.monotonic()
            slow = [pool.submit(_sleep, http, 4.0) for _ in range(40)]
            time.sleep(1.0)  # all 40 sent: 32 run, 8 wait for the model's threads
            assert not any(f.done() for f in slow)
            fast_started = time.monotonic()
            fast = http.post(FAST, json=ECHO_BODY)
            fast_took = time.monotonic() - fast_started
            answers = [f.result() for f in slow]
            slow_took = time.monotonic() - started
    finally:
        server.stop()
    assert fast.status_code == 200, fast.text
    assert fast.json()["outputs"][0]["data"] == [1.0]
    assert fast_took < 0.5, f"the fast model waited {fast_took:.2f} s behind the slow one"
    assert [a.status_code for a in answers] == [200] * 40
    assert slow_took >= 8.0  # 32 ran at once, then the 8 queued: the bound is real


def test_a_full_model_queue_answers_429_with_retry_after() -> None:
    server = start_server("--model-concurrency", "1", "--model-queue", "1")
    try:
        with _client(server.url) as http, ThreadPoolExecutor(3) as pool:
            first = pool.submit(_sleep, http, 2.0)
            time.sleep(0.5)
            queued = pool.submit(_sleep, http, 0.0)
            time.sleep(0.3)
            refused = _sleep(http, 0.0)
            other = http.post(FAST, json=ECHO_BODY)  # another model is not affected
            answers = [first.result(), queued.result()]
    finally:
        server.stop()
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"].startswith("Overloaded: the model is busy")
    assert [a.status_code for a in answers] == [200, 200]
    assert other.status_code == 200


def test_request_timeout_answers_504_and_drops_the_late_result() -> None:
    server = start_server("--request-timeout", "1")
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            started = time.monotonic()
            late = _sleep(http, 3.0)
            took = time.monotonic() - started
            # The same connection: the next answer is echo's, not sleepy's late result.
            time.sleep(2.5)
            after = http.post(FAST, json=ECHO_BODY)
            with httpx.Client(base_url=server.url, timeout=60) as fresh:
                quick = fresh.post(SLOW, json={"inputs": [0.1]})
    finally:
        server.stop()
    assert late.status_code == 504, late.text
    assert late.json()["error"] == "RequestTimeout: the request took longer than 1 s"
    assert took < 2.0
    assert after.status_code == 200
    assert after.json()["model_name"] == "echo"
    assert quick.status_code == 200


FACES = pytest.mark.parametrize("face", ["mlserve", "asgi"])


@FACES
def test_sigterm_with_64_in_flight_readiness_first_none_fail_exit_0(face: str) -> None:
    server = start_server(
        "--drain-delay", "1", "--drain-timeout", "20", "--model-concurrency", "64", "--http", face
    )
    try:
        with _client(server.url) as http, ThreadPoolExecutor(64) as pool:
            assert http.get("/v2/health/ready").status_code == 200
            flight = [pool.submit(_sleep, http, 2.0) for _ in range(64)]
            time.sleep(0.8)
            assert not any(f.done() for f in flight)
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            with httpx.Client(base_url=server.url, timeout=10) as fresh:
                ready = fresh.get("/v2/health/ready")
                model_ready = fresh.get("/v2/models/echo/ready")
                served = fresh.post(FAST, json=ECHO_BODY)  # still taken during the delay
            answers = [f.result() for f in flight]
        code = server.proc.wait(30)
        stopped_after = time.monotonic() - signalled
    finally:
        server.stop()
    assert ready.status_code == 503 and ready.json()["ready"] is False
    assert model_ready.status_code == 503
    assert served.status_code == 200
    assert [a.status_code for a in answers] == [200] * 64
    assert code == 0
    assert stopped_after < 20


@FACES
def test_drain_timeout_bounds_the_stop(face: str) -> None:
    server = start_server("--drain-timeout", "1", "--http", face)
    try:
        with _client(server.url) as http, ThreadPoolExecutor(1) as pool:
            stuck = pool.submit(_sleep, http, 30.0)
            time.sleep(0.5)
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            code = server.proc.wait(20)
            stopped_after = time.monotonic() - signalled
            try:
                outcome: int | str = stuck.result().status_code
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
    finally:
        server.stop()
    assert code == 0
    assert stopped_after < 5, f"stopped {stopped_after:.1f} s after SIGTERM, drain timeout 1 s"
    # Cut: the connection closes (mlserve's face) or uvicorn answers 500 for the cancelled task.
    assert outcome in ("RemoteProtocolError", 500), outcome


def test_grpc_answers_deadline_exceeded_and_resource_exhausted() -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    def sleep_input(seconds: float) -> list[grpcclient.InferInput]:
        tensor = grpcclient.InferInput("s", [1], "FP32")
        tensor.set_data_from_numpy(np.array([seconds], dtype=np.float32))
        return [tensor]

    server = start_server(
        "--request-timeout", "1", "--model-concurrency", "1", "--model-queue", "0"
    )
    try:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        with pytest.raises(InferenceServerException) as late:
            client.infer("sleepy", sleep_input(3.0))
        time.sleep(2.5)  # the timed-out call holds the model's one thread until it ends
        with ThreadPoolExecutor(1) as pool:
            busy = pool.submit(client.infer, "sleepy", sleep_input(0.8))
            time.sleep(0.3)
            with pytest.raises(InferenceServerException) as refused:
                client.infer("sleepy", sleep_input(0.0))
            assert busy.result().as_numpy("output-0") is not None
    finally:
        server.stop()
    assert late.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert "took longer than 1 s" in late.value.message()
    assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
