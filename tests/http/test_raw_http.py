"""Raw HTTP (what curl sends) against a real server: the mlrun row form and the URL grammar."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.netserver import ServerProcess


@pytest.fixture(scope="module")
def http(net_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=net_server.url, timeout=60) as client:
        yield client


def test_health(http: httpx.Client) -> None:
    assert http.get("/v2/health/live").json() == {"live": True}
    assert http.get("/v2/health/ready").json() == {"ready": True}
    assert http.get("/").json()["version"] == "v2"
    assert http.get("/v2").json()["name"] == "mlserve"
    assert "echo" in http.get("/v2/models").json()["models"]
    assert http.get("/v2/models/scale/ready").json() == {"name": "scale", "ready": True}


def test_row_form(http: httpx.Client) -> None:
    answer = http.post("/v2/models/echo/infer", content=b'{"inputs": [[1, 2], [3, 4]], "id": "r1"}')
    assert answer.status_code == 200
    body = answer.json()
    assert body["outputs"] == [[1, 2], [3, 4]]
    assert body["id"] == "r1" and body["model_name"] == "echo" and "timestamp" in body
    assert http.post("/v2/models/echo", json={"inputs": [5]}).json()["outputs"] == [5]
    assert http.post("/", json={"model": "version:1", "inputs": [0]}).json()["outputs"] == [1]


def test_tensor_form_over_raw_http(http: httpx.Client) -> None:
    body = {
        "inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}],
        "outputs": [{"name": "total"}],
    }
    answer = http.post("/v2/models/scale/versions/ignored/infer", json=body)
    assert answer.status_code == 404
    answer = http.post("/v2/models/scale/infer", json=body)
    assert answer.json()["outputs"] == [
        {"name": "total", "datatype": "FP32", "shape": [1], "data": [3.0]}
    ]


def test_versioned_urls(http: httpx.Client) -> None:
    assert http.post("/v2/models/version/versions/1/infer", json={"inputs": [0]}).json()[
        "outputs"
    ] == [1]
    latest = http.post("/v2/models/version/infer", json={"inputs": [0]}).json()
    assert latest["outputs"] == [2] and latest["model_version"] == "2"
    assert http.get("/v2/models/version/versions/2").json()["versions"] == ["1", "2"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v2/models/nope/infer", b'{"inputs": [1]}', 404),
        ("GET", "/v2/models/nope", None, 404),
        ("GET", "/v3/anything", None, 404),
        ("POST", "/v2/models/echo/infer", b'{"inputs": [1', 400),
        ("POST", "/v2/models/echo/infer", b'{"no_inputs": 1}', 400),
        (
            "POST",
            "/v2/models/echo/infer",
            b'{"inputs": [{"name": "a", "shape": [3], "datatype": "FP32", "data": [1, 2]}]}',
            400,
        ),
        (
            "POST",
            "/v2/models/scale/infer",
            b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}',
            400,
        ),
        ("POST", "/v2/models/echo/no_such_op", b'{"inputs": [1]}', 400),
    ],
)
def test_errors(
    http: httpx.Client, method: str, path: str, body: bytes | None, status: int
) -> None:
    answer = http.request(method, path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/json"
    assert isinstance(answer.json()["error"], str)


def test_sync_predict_does_not_stall_the_loop(
    http: httpx.Client, net_server: ServerProcess
) -> None:
    """Model gate's sync predict blocks until model gate's op ``release`` runs: it
    can only be answered if a blocked predict leaves the loop free to serve it."""
    answers: dict[str, object] = {}

    def blocked() -> None:
        with httpx.Client(base_url=net_server.url, timeout=60) as other:
            answers["gate"] = other.post("/v2/models/gate/infer", json={"inputs": [0]}).json()[
                "outputs"
            ]

    thread = threading.Thread(target=blocked)
    thread.start()
    try:
        # While the gate's predict blocks a worker thread, the loop answers ...
        while not http.get("/v2/models/gate/waiting").json()["waiting"]:
            assert thread.is_alive()
            time.sleep(0.01)
        assert http.post("/v2/models/echo/infer", json={"inputs": [7]}).json()["outputs"] == [7]
        # ... and the release call itself is served while the gate's predict still waits.
        assert http.post("/v2/models/gate/release", json={}).json() == {"released": True}
    finally:
        thread.join(60)
    # True: the gate was opened by the release call, not by its 30 s safety timeout.
    assert answers["gate"] == [True]


def test_sync_predict_runs_in_the_pool_async_on_the_loop(http: httpx.Client) -> None:
    sync_thread = http.post("/v2/models/where/infer", json={"inputs": [0]}).json()["outputs"][0]
    async_thread = http.post("/v2/models/async-where/infer", json={"inputs": [0]}).json()[
        "outputs"
    ][0]
    assert sync_thread.startswith("mlserve-worker")
    assert async_thread == "MainThread"
