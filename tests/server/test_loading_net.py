"""Start-up that says what it does, on real servers: one line per model as its load
starts and one as it ends (with the time, or the reason), loads side by side, and
loads through the control APIs (V2 REST, Triton's gRPC) that report a failing load()."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, log_messages, log_position, start_server

FN = "tests/server/loading_fn.py"


def served(tmp_path: Path, *args: str, **env: str) -> ServerProcess:
    """``FN`` served with ``args`` and ``env``; its log goes to ``tmp_path/server.log``."""
    with (tmp_path / "server.log").open("wb") as log:
        return start_server(*args, target=FN, env=env, stderr=log)


def test_models_load_side_by_side_and_each_says_when_it_is_ready(tmp_path: Path) -> None:
    server = served(tmp_path, MLSERVE_LOAD_THREADS="3")
    try:
        assert httpx.get(f"{server.url}/v2/health/ready").json() == {"ready": True}
    finally:
        assert server.stop() == 0
    said = log_messages(tmp_path / "server.log")
    started = [log_position(said, f"loading model {name}") for name in ("slow", "later", "flaky")]
    ready = {
        name: log_position(said, rf"model {name} ready in \d+\.\d\d s")
        for name in ("slow", "later", "flaky")
    }
    # each load started before the first slow one ended: they overlapped
    assert max(started) < min(ready["slow"], ready["later"])
    for name in ("slow", "later"):  # the async load() was awaited, whole
        assert float(said[ready[name]].split()[-2]) >= 1.5


def test_one_load_thread_loads_the_models_one_after_another(tmp_path: Path) -> None:
    server = served(tmp_path, MLSERVE_LOAD_THREADS="1", LOAD_SECONDS="0.1")
    assert server.stop() == 0
    said = log_messages(tmp_path / "server.log")
    order = [m for m in said if m.startswith(("loading model", "model "))]
    assert [re.sub(r" in \S+ s$", "", m) for m in order] == [
        "loading model slow",
        "model slow ready",
        "loading model later",
        "model later ready",
        "loading model flaky",
        "model flaky ready",
    ]


@pytest.fixture
def control(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """A server with explicit model control; ``flaky``'s next load fails once the
    returned file exists."""
    fail = tmp_path / "fail"
    server = served(
        tmp_path, "--model-control-mode", "explicit", FAIL_FILE=str(fail), LOAD_SECONDS="0"
    )
    yield server, fail
    assert server.stop() == 0


def _generation(server: ServerProcess) -> object:
    answer = httpx.post(f"{server.url}/v2/models/flaky/infer", json={"inputs": [1]})
    assert answer.status_code == 200, answer.text
    return answer.json()["outputs"][0]


def test_a_failing_load_answers_an_error_and_the_loaded_model_serves_on(
    control: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, fail = control
    rest = httpclient.InferenceServerClient(server.address)
    grpc = grpcclient.InferenceServerClient(server.grpc_address)
    rest.load_model("flaky")
    assert _generation(server) == 2  # loaded again: a new object
    fail.touch()
    with pytest.raises(InferenceServerException) as error:
        rest.load_model("flaky")
    assert error.value.status() == "503"
    assert "failed to load 'flaky', flaky: RuntimeError: weights are corrupt" in str(error.value)
    with pytest.raises(InferenceServerException) as error:
        grpc.load_model("flaky")
    assert error.value.status() == "StatusCode.UNAVAILABLE"
    assert "RuntimeError: weights are corrupt" in error.value.message()
    assert _generation(server) == 2  # the version that loaded before serves on
    assert rest.is_model_ready("flaky")
    said = log_messages(tmp_path / "server.log")
    assert sum("failed to load model flaky after" in m for m in said) == 2
    fail.unlink()
    grpc.load_model("flaky")
    assert _generation(server) == 3


def test_a_model_unloaded_then_failing_to_load_answers_503_with_the_reason(
    control: tuple[ServerProcess, Path],
) -> None:
    server, fail = control
    rest = httpclient.InferenceServerClient(server.address)
    rest.unload_model("flaky")
    answer = httpx.post(f"{server.url}/v2/models/flaky/infer", json={"inputs": [1]})
    assert answer.status_code == 404
    fail.touch()
    with pytest.raises(InferenceServerException, match="weights are corrupt"):
        rest.load_model("flaky")
    answer = httpx.post(f"{server.url}/v2/models/flaky/infer", json={"inputs": [1]})
    assert answer.status_code == 503
    assert answer.json() == {
        "error": "ModelNotReady: model flaky is not ready: RuntimeError: weights are corrupt"
    }
    index = {row["name"]: row for row in rest.get_model_repository_index()}
    assert index["flaky"]["state"] == "UNAVAILABLE"
    assert index["flaky"]["reason"] == "RuntimeError: weights are corrupt"


def test_with_hide_errors_a_failing_load_shows_no_reason(tmp_path: Path) -> None:
    fail = tmp_path / "fail"
    server = served(
        tmp_path,
        "--model-control-mode",
        "explicit",
        "--hide-errors",
        FAIL_FILE=str(fail),
        LOAD_SECONDS="0",
    )
    try:
        fail.touch()
        answer = httpx.post(f"{server.url}/v2/repository/models/flaky/load", json={})
        assert answer.status_code == 503
        assert re.fullmatch(r"internal error, error id [0-9a-f]{16}", answer.json()["error"])
        grpc = grpcclient.InferenceServerClient(server.grpc_address)
        with pytest.raises(InferenceServerException) as error:
            grpc.load_model("flaky")
        assert error.value.status() == "StatusCode.UNAVAILABLE"
        assert "corrupt" not in error.value.message()
        assert _generation(server) == 1  # the loaded model serves on
    finally:
        assert server.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert "RuntimeError: weights are corrupt" in log  # the reason is in the log only
