"""Prometheus metrics (docs/monitoring.md#prometheus-metrics): per model and operation,
load times, stream counts; every HTTP and gRPC answer by code, and the standard process
and python families, scraped from real servers."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

import mlserve
from mlserve.monitoring.metrics import REGISTRY
from tests.monitoring.conftest import FailingModel, SumModel, unique
from tests.netserver import ServerProcess, start_server

ROOT = Path(__file__).resolve().parents[2]
ROWS = {"inputs": [[1, 2]]}


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_requests_errors_latency_and_load_time_per_model() -> None:
    good, bad = unique("good"), unique("bad")
    fn = mlserve.new_function("fn")
    fn.add_model(f"{good}:v1", class_name=SumModel)
    fn.add_model(bad, class_name=FailingModel)
    server = fn.to_mock_server()  # monitoring off: the metrics are still kept
    for _ in range(3):
        server.test(f"/v2/models/{good}/infer", ROWS)
    server.test(f"/v2/models/{good}/explain", ROWS, silent=True)
    server.test(f"/v2/models/{bad}/infer", ROWS, silent=True)
    labels = {"model": good, "version": "v1", "operation": "infer"}
    assert value("mlserve_model_requests_total", **labels) == 3
    assert value("mlserve_model_errors_total", **labels) == 0
    assert value("mlserve_model_latency_seconds_count", **labels) == 3
    explain = {**labels, "operation": "explain"}
    assert value("mlserve_model_errors_total", **explain) == 1
    failed = {"model": bad, "version": "", "operation": "infer"}
    assert value("mlserve_model_requests_total", **failed) == 1
    assert value("mlserve_model_errors_total", **failed) == 1
    load = REGISTRY.get_sample_value("mlserve_model_load_seconds", {"model": good, "version": "v1"})
    assert load is not None and load >= 0


def test_stream_sent_is_counted(make_server: Any) -> None:
    name = unique()
    server = make_server(f"dummy://{name}")
    server.test("/v2/models/m1/infer", ROWS)
    server.wait_for_completion()
    assert value("mlserve_stream_sent_total", stream=f"dummy://{name}") == 1


def test_import_mlserve_loads_no_stream_client_or_database() -> None:
    code = (
        "import sys, mlserve; heavy = [m for m in ('prometheus_client', 'sqlalchemy', "
        "'confluent_kafka', 'redis', 'mlserve.monitoring.pusher') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_recorded_latencies_fall_in_their_buckets_across_folds() -> None:
    from mlserve.core.recorder import FOLD_AT, LATENCY_BUCKETS, ModelRecorder

    recorder = ModelRecorder("m", "1")
    latencies_ns = [400_000, 500_000, 500_001, 7_000_000, 20_000_000_000]  # <=0.5 ms twice, ...
    rounds = FOLD_AT  # several folds on the way
    for _ in range(rounds):
        for elapsed_ns in latencies_ns:
            recorder.ok("infer", elapsed_ns)
    recorder.ok("explain", 1)
    recorder.error("infer")
    snap = {op: tuple(counts) for op, *counts, _ in recorder.snapshot()}
    requests, errors, seconds, buckets = snap["infer"]
    assert (requests, errors) == (5 * rounds + 1, 1)
    assert abs(seconds - rounds * sum(latencies_ns) / 1e9) < 1e-6 * seconds
    expected = [0] * (len(LATENCY_BUCKETS) + 1)
    for elapsed_ns in latencies_ns:
        index = next((i for i, b in enumerate(LATENCY_BUCKETS) if elapsed_ns / 1e9 <= b), -1)
        expected[index] += rounds
    assert buckets == expected
    assert snap["explain"][:2] == (1, 0) and snap["explain"][3][0] == 1


# ---- the faces' responses and the standard collectors, against real servers ----------

TOKEN = "tok-metrics-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
INFER = {"inputs": [{"name": "x", "datatype": "INT64", "shape": [2], "data": [1, 2]}]}
V2 = "inference.GRPCInferenceService"
STANDARD = (  # process_* (Linux) and python_*: prometheus_client's default collectors
    "process_cpu_seconds",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "python_info",
    "python_gc_collections",
)


def scrape(server: ServerProcess) -> dict[str, Metric]:
    """The server's /metrics, parsed: family name -> family."""
    reply = httpx.get(f"{server.url}/metrics", headers=AUTH)
    assert reply.status_code == 200
    return {family.name: family for family in text_string_to_metric_families(reply.text)}


def samples(family: Metric, *labels: str) -> dict[tuple[str, ...], float]:
    """A counter family's ``_total`` values by the values of ``labels``."""
    return {
        tuple(s.labels[name] for name in labels): s.value
        for s in family.samples
        if s.name.endswith("_total")
    }


def raw_answer(port: int, head: bytes) -> int:
    """The status of the answer to ``head`` sent on a raw socket (the server closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@pytest.fixture(scope="module", params=["mlserve", "asgi"])
def secured(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """Each HTTP face with a bearer token and small body and header limits."""
    server = start_server(
        "--http",
        request.param,
        "--auth-token",
        TOKEN,
        "--max-body-size",
        "4096",
        "--max-headers",
        "20",
        target="tests/http/secure_fn.py",
    )
    yield server
    assert server.stop() == 0


def test_every_http_answer_is_counted_by_method_and_code(secured: ServerProcess) -> None:
    infer = f"{secured.url}/v2/models/echo/infer"
    assert httpx.post(infer, json=INFER, headers=AUTH).status_code == 200
    bad_json = {**AUTH, "Content-Type": "application/json"}
    assert httpx.post(infer, content=b"{", headers=bad_json).status_code == 400
    assert (
        httpx.post(f"{secured.url}/v2/models/nope/infer", json=INFER, headers=AUTH).status_code
        == 404
    )
    assert httpx.get(infer, headers=AUTH).status_code == 405
    assert httpx.post(infer, json=INFER).status_code == 401
    token = f"Authorization: Bearer {TOKEN}\r\n".encode()
    huge = b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n%sContent-Length: 99999\r\n\r\n"
    assert raw_answer(secured.port, huge % token) == 413
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(30))
    assert (
        raw_answer(secured.port, b"GET /v2 HTTP/1.1\r\nHost: x\r\n%s%s\r\n" % (token, many)) == 431
    )
    metrics = scrape(secured)
    assert samples(metrics["mlserve_http_responses"], "method", "code") == {
        ("POST", "200"): 1,
        ("POST", "400"): 1,
        ("POST", "404"): 1,
        ("GET", "405"): 1,
        ("POST", "401"): 1,
        ("POST", "413"): 1,
        ("GET", "431"): 1,
    }
    assert metrics["mlserve_http_responses"].type == "counter"
    assert set(STANDARD) <= set(metrics)
    assert metrics["process_start_time_seconds"].samples[0].value > 0
    # the scrape itself is counted (in the next one)
    assert samples(scrape(secured)["mlserve_http_responses"], "method", "code")[("GET", "200")] == 1


def test_every_grpc_call_is_counted_by_service_method_and_code(secured: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(secured.grpc_address)
    headers = {"authorization": f"Bearer {TOKEN}"}
    tensor = grpcclient.InferInput("x", [2], "INT32")
    tensor.set_data_from_numpy(np.array([4, 5], dtype=np.int32))
    assert client.is_server_live()  # liveness needs no credentials
    client.infer("echo", [tensor], headers=headers)
    for model, sent, code in (
        ("nope", headers, "StatusCode.NOT_FOUND"),
        ("a/b", headers, "StatusCode.INVALID_ARGUMENT"),
        ("leaky", headers, "StatusCode.INTERNAL"),
        ("echo", None, "StatusCode.UNAUTHENTICATED"),
    ):
        with pytest.raises(InferenceServerException) as failed:
            client.infer(model, [tensor], headers=sent)
        assert failed.value.status() == code
    answers: list[Any] = []
    client.start_stream(callback=lambda result, error: answers.append(error), headers=headers)
    client.async_stream_infer("echo", [tensor])
    client.async_stream_infer("nope", [tensor])  # an error_message: the stream goes on
    client.stop_stream()
    assert len(answers) == 2 and answers[0] is None and answers[1] is not None
    client.close()
    counted = samples(scrape(secured)["mlserve_grpc_responses"], "service", "method", "code")
    assert counted == {
        (V2, "ServerLive", "OK"): 1,
        (V2, "ModelInfer", "OK"): 1,
        (V2, "ModelInfer", "NOT_FOUND"): 1,
        (V2, "ModelInfer", "INVALID_ARGUMENT"): 1,
        (V2, "ModelInfer", "INTERNAL"): 1,
        (V2, "ModelInfer", "UNAUTHENTICATED"): 1,
        (V2, "ModelStreamInfer", "OK"): 1,  # once, when the stream ends
    }


def test_tf_serving_calls_are_counted_under_their_service(secured: ServerProcess) -> None:
    pytest.importorskip("tensorflow_serving")
    path = "/tensorflow.serving.ModelService/GetModelStatus"
    status_of_echo = b"\n\x06\n\x04echo"  # GetModelStatusRequest(model_spec.name="echo")
    with grpc.insecure_channel(secured.grpc_address) as channel:
        call = channel.unary_unary(path)
        with pytest.raises(grpc.RpcError) as refused:
            call(status_of_echo, timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        call(status_of_echo, metadata=[("authorization", f"Bearer {TOKEN}")], timeout=120)
    counted = samples(scrape(secured)["mlserve_grpc_responses"], "service", "method", "code")
    service = "tensorflow.serving.ModelService"
    assert counted[service, "GetModelStatus", "UNAUTHENTICATED"] == 1
    assert counted[service, "GetModelStatus", "OK"] == 1


def test_each_worker_answers_with_its_own_process_and_python_families() -> None:
    server = start_server("--workers", "2")
    try:
        started = set()
        for _ in range(6):  # the kernel spreads the connections over the workers
            reply = httpx.get(f"{server.url}/metrics")
            families = {f.name: f for f in text_string_to_metric_families(reply.text)}
            assert set(STANDARD) <= set(families)
            assert "mlserve_http_responses" in families
            started.add(families["process_start_time_seconds"].samples[0].value)
        assert 1 <= len(started) <= 2  # one start time per worker that answered
    finally:
        assert server.stop() == 0
