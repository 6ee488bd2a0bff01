"""A rollout on a real ``mlserve serve``: a 5-second shadow never delays the caller, the
same keys reach the same variants through the mock server, HTTP and gRPC, and the
admin calls (REST and tritonclient's gRPC load) change the weights."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, start_server
from tests.traffic.rollout_fn import serving_function

FN = "tests/traffic/rollout_fn.py"
ADMIN, USER = "adm-7c1e", "usr-52d0"
USER_HEADERS = {"Authorization": f"Bearer {USER}"}
KEYS = [f"user-{i}" for i in range(60)]


STREAM = Path(tempfile.mkdtemp(prefix="rollout-")) / "model-logs.jsonl"


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    server = start_server(
        "--model-control-mode",
        "explicit",
        "--auth-token",
        USER,
        target=FN,
        env={
            "MLSERVE_ADMIN_TOKEN": ADMIN,
            "ROLLOUT_SHADOW_SLEEP": "5",
            "ROLLOUT_STREAM": str(STREAM),
        },
    )
    yield server
    assert server.stop() == 0
    shutil.rmtree(STREAM.parent, ignore_errors=True)


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


def _traffic(server: ServerProcess) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v2/models/m/traffic", headers=_admin(), timeout=30)
    assert answer.status_code == 200, answer.text
    traffic: dict[str, Any] = answer.json()
    return traffic


def test_a_slow_shadow_never_delays_the_caller(served: ServerProcess) -> None:
    """The shadow sleeps 5 s a call: the answer is back while it still runs."""
    answer = httpx.post(
        f"{served.url}/v2/models/m/infer", json={"inputs": [1]}, headers=USER_HEADERS, timeout=30
    )
    assert answer.status_code == 200
    slow = _traffic(served)["shadows"]["m:slow"]
    assert slow["agree"] + slow["disagree"] + slow["error"] == 0  # still sleeping
    deadline = time.monotonic() + 30
    while (
        _traffic(served)["shadows"]["m:slow"]["agree"]
        + _traffic(served)["shadows"]["m:slow"]["disagree"]
        == 0
    ):
        assert time.monotonic() < deadline, "the shadow never finished"
        time.sleep(0.2)
    failing = _traffic(served)["shadows"]["m-bad"]
    assert failing["error"] >= 1  # it failed; the caller got its answer all the same
    primary = answer.json()
    deadline = time.monotonic() + 30
    while True:  # the stream is written in the background
        lines = STREAM.read_text().splitlines() if STREAM.exists() else []
        records = [json.loads(line) for line in lines]
        slow = [r for r in records if r.get("version") == "slow"]
        if slow:
            break
        assert time.monotonic() < deadline, records
    assert slow[0]["shadow"] is True and slow[0]["shadow_of"] == "m"
    assert slow[0]["resp"]["primary_outputs"] == primary["outputs"]
    assert slow[0]["resp"]["outputs"] == [1]
    served_by = next(r for r in records if r.get("version") == primary["model_version"])
    assert "shadow" not in served_by


def _http_variant(server: ServerProcess, key: str, **headers: str) -> str:
    answer = httpx.post(
        f"{server.url}/v2/models/m/infer",
        json={"inputs": [1]},
        headers={"x-mlserve-route-key": key, **USER_HEADERS, **headers},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert answer.headers["x-mlserve-route"] == body["parameters"]["route"]
    assert body["model_version"] == body["parameters"]["route"].partition(":")[2]
    route: str = body["parameters"]["route"]
    return route


def _grpc_variant(client: grpcclient.InferenceServerClient, key: str) -> str:
    tensor = grpcclient.InferInput("x", [1], "FP64")
    tensor.set_data_from_numpy(np.array([1.0]))
    metadata = {"x-mlserve-route-key": key, "authorization": f"Bearer {USER}"}
    result = client.infer("m", [tensor], headers=metadata)
    response = result.get_response(as_json=True)
    route: str = response["parameters"]["route"]["string_param"]
    assert response["model_version"] == route.partition(":")[2]
    return route


def test_the_same_keys_reach_the_same_variants_through_every_face(
    served: ServerProcess,
) -> None:
    mock = serving_function().to_mock_server()
    expected = {
        key: mock.test("/v2/models/m/infer", {"inputs": [1]}, headers={"x-mlserve-route-key": key})[
            "parameters"
        ]["route"]
        for key in KEYS
    }
    assert set(expected.values()) == {"m:v1", "m:v2"}
    assert {key: _http_variant(served, key) for key in KEYS} == expected
    client = grpcclient.InferenceServerClient(served.grpc_address)
    assert {key: _grpc_variant(client, key) for key in KEYS} == expected
    by_field = httpx.post(
        f"{served.url}/v2/models/m/infer",
        json={"inputs": [1], "parameters": {"user": KEYS[0]}},
        headers=USER_HEADERS,
        timeout=30,
    )
    assert by_field.json()["parameters"]["route"] == expected[KEYS[0]]
    forced = _http_variant(served, KEYS[0], **{"x-mlserve-route": "v2"})
    assert forced == "m:v2"


def test_weights_change_through_rest_behind_the_admin_token(served: ServerProcess) -> None:
    url = f"{served.url}/v2/repository/models/m/weights"
    refused = httpx.post(url, json={"weights": {"v2": 100}}, headers=USER_HEADERS, timeout=30)
    assert refused.status_code == 403 and "admin token" in refused.text
    bad = httpx.post(url, json={"weights": {"v2": "lots"}}, headers=_admin(), timeout=30)
    assert bad.status_code == 400 and "number" in bad.text
    unknown = httpx.post(url, json={"weights": {"v7": 1}}, headers=_admin(), timeout=30)
    assert unknown.status_code == 400 and "no variant 'v7'" in unknown.text
    changed = httpx.post(url, json={"weights": {"v1": 0}}, headers=_admin(), timeout=30)
    assert changed.status_code == 200, changed.text
    assert changed.json()["weights"] == {"m:v1": 0.0, "m:v2": 10.0}
    assert {_http_variant(served, key) for key in KEYS} == {"m:v2"}
    back = httpx.post(url, json={"weights": {"v1": 90}}, headers=_admin(), timeout=30)
    assert back.json()["weights"] == {"m:v1": 90.0, "m:v2": 10.0}


def test_weights_change_through_tritonclient_grpc(served: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(served.grpc_address)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model(
            "m", config='{"weights": {"v1": 0}}', headers={"authorization": f"Bearer {USER}"}
        )
    assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
    admin = {"authorization": f"Bearer {ADMIN}"}
    client.load_model("m", config='{"weights": {"v1": 0}}', headers=admin)
    assert _traffic(served)["weights"] == {"m:v1": 0.0, "m:v2": 10.0}
    assert {_grpc_variant(client, key) for key in KEYS[:20]} == {"m:v2"}
    client.load_model("m", config='{"weights": {"v1": 90}}', headers=admin)
    assert _traffic(served)["weights"] == {"m:v1": 90.0, "m:v2": 10.0}


def _worker_weights(server: ServerProcess) -> dict[int, dict[str, float]]:
    """Each worker's weights of ``m``, asked on new connections until both answered."""
    seen: dict[int, dict[str, float]] = {}
    deadline = time.monotonic() + 60
    while len(seen) < 2:
        assert time.monotonic() < deadline, f"two workers did not both answer: {seen}"
        with httpx.Client(base_url=server.url, timeout=30) as http:
            pid = http.post("/v2/models/pid/pid", json={}).json()["pid"]
            seen[pid] = http.get("/v2/models/m/traffic").json()["weights"]
    return seen


def test_a_weight_change_reaches_every_worker_and_a_later_one() -> None:
    server = start_server(
        "--workers",
        "2",
        target=FN,
        env={"MLSERVE_MODEL_CONTROL_MODE": "explicit", "ROLLOUT_SHADOW_SLEEP": "0"},
    )
    try:
        assert list(_worker_weights(server).values()) == [{"m:v1": 90.0, "m:v2": 10.0}] * 2
        with httpx.Client(base_url=server.url, timeout=30) as http:
            answer = http.post("/v2/repository/models/m/weights", json={"weights": {"v2": 30}})
        assert answer.status_code == 200, answer.text
        with httpx.Client(base_url=server.url, timeout=30) as http:
            answer = http.post("/v2/repository/models/m/weights", json={"weights": {"v1": 70}})
        assert answer.status_code == 200, answer.text
        weights = _worker_weights(server)
        assert list(weights.values()) == [{"m:v1": 70.0, "m:v2": 30.0}] * 2
        before = set(weights)
        os.kill(min(before), signal.SIGKILL)  # the supervisor starts another, which replays
        deadline = time.monotonic() + 60
        while set(weights) == before:
            assert time.monotonic() < deadline, "no worker was started again"
            weights = _worker_weights(server)
        assert list(weights.values()) == [{"m:v1": 70.0, "m:v2": 30.0}] * 2
    finally:
        code = server.stop()
    assert code == 0
