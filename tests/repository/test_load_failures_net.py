"""A repository served by ``mlserve serve``: versions load side by side and say so; a
version whose load() failed answers 503 with the reason (REST and gRPC), and a load
through a control API (V2 REST, Triton's gRPC, TF Serving's ModelService) whose load()
raises answers an error while what served before serves on."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ROOT, ServerProcess, log_messages, log_position, start_server
from tests.repository.conftest import write_config
from tests.repository.fixtures import write_version
from tests.services import free_port, wait_for_port

BODY = {"inputs": [[1.0, 2.0]]}
TIMEOUT = 60.0  # the first TF Serving call imports TensorFlow in the server


def _x() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("x", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
    return [tensor]


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """Models ``m`` and ``n`` (1.5 s loads) and ``b``, whose only version fails to load,
    served with explicit model control; the server's log is ``tmp_path/server.log``."""
    base = tmp_path / "models"
    write_version(base, "m", 1, bias=1, load_seconds=1.5)
    write_version(base, "n", 1, bias=10, load_seconds=1.5)
    (base / "b" / "1").mkdir(parents=True)
    (base / "b" / "1" / "model.json").write_text("not json")
    config = write_config(tmp_path / "config.yaml", [{"name": "m"}, {"name": "n"}, {"name": "b"}])
    with (tmp_path / "server.log").open("wb") as log:
        server = start_server(
            "--model-config",
            str(config),
            "--poll-interval",
            "0",
            "--model-control-mode",
            "explicit",
            target=str(base),
            env={"MLSERVE_LOAD_THREADS": "3"},
            stderr=log,
        )
    yield server, base
    assert server.stop() == 0


def test_versions_load_side_by_side_and_say_so(
    repository: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, _ = repository
    said = log_messages(tmp_path / "server.log")
    started = [log_position(said, f"loading model {m} version 1") for m in ("m", "n", "b")]
    ready = [log_position(said, rf"model {m} version 1 ready in \d+\.\d\d s") for m in ("m", "n")]
    assert max(started) < min(ready)  # the three loads overlapped
    failed = log_position(
        said, r"failed to load model b version 1 after \d+\.\d\d s: JSONDecodeError.*"
    )
    assert started[2] < failed
    assert log_position(said, "serving model m version 1") > ready[0]
    # readiness follows every configured model: b never loaded
    assert httpx.get(f"{server.url}/v2/health/ready").status_code == 503


def test_a_version_that_failed_to_load_answers_503_with_the_reason(
    repository: tuple[ServerProcess, Path],
) -> None:
    server, _ = repository
    reason = "model b failed to load: version 1: JSONDecodeError: "
    for method, path in [
        ("POST", "/v2/models/b/infer"),
        ("GET", "/v2/models/b"),
        ("GET", "/v2/models/b/ready"),
    ]:
        answer = httpx.request(method, f"{server.url}{path}", json=BODY)
        assert answer.status_code == 503, (path, answer.text)
        assert answer.json()["error"].startswith(f"ModelNotReady: {reason}")
    answer = httpx.post(f"{server.url}/v2/models/b/versions/1/infer", json=BODY)
    assert answer.status_code == 503
    assert "model b version 1 failed to load: JSONDecodeError" in answer.json()["error"]
    assert httpx.post(f"{server.url}/v2/models/zz/infer", json=BODY).status_code == 404
    client = grpcclient.InferenceServerClient(server.grpc_address)
    for call in (lambda: client.infer("b", _x()), lambda: client.get_model_metadata("b")):
        with pytest.raises(InferenceServerException) as error:
            call()
        assert error.value.status() == "StatusCode.UNAVAILABLE"
        assert reason in error.value.message()
    assert client.infer("m", _x()).as_numpy("output-0").tolist() == [4.0]


def test_loads_through_the_control_apis_report_a_failing_load(
    repository: tuple[ServerProcess, Path],
) -> None:
    server, base = repository
    rest = httpclient.InferenceServerClient(server.address)
    remote = grpcclient.InferenceServerClient(server.grpc_address)
    with pytest.raises(InferenceServerException) as error:
        rest.load_model("b")
    assert error.value.status() == "503"
    assert "failed to load 'b', version 1: JSONDecodeError" in str(error.value)
    with pytest.raises(InferenceServerException) as error:
        remote.load_model("b")
    assert error.value.status() == "StatusCode.UNAVAILABLE"
    assert "failed to load 'b', version 1: JSONDecodeError" in error.value.message()
    # a new version that fails: the load says so, and the version before serves on
    (base / "m" / "2").mkdir()
    (base / "m" / "2" / "model.json").write_text("{broken")
    for load in (rest.load_model, remote.load_model):
        with pytest.raises(InferenceServerException) as error:
            load("m")
        assert "failed to load 'm', version 2: JSONDecodeError" in str(error.value)
        assert "still serving version 1" in str(error.value)
    answer = httpx.post(f"{server.url}/v2/models/m/infer", json=BODY).json()
    assert (answer["model_version"], answer["outputs"]) == ("1", [4.0])
    write_version(base, "m", 3, bias=3)
    rest.load_model("m")
    assert httpx.post(f"{server.url}/v2/models/m/infer", json=BODY).json()["model_version"] == "3"


def test_tf_serving_config_reload_reports_a_failing_load(
    repository: tuple[ServerProcess, Path],
) -> None:
    pytest.importorskip("tensorflow")
    from tensorflow_serving.apis import (
        model_management_pb2,
        model_service_pb2_grpc,
    )
    from tensorflow_serving.config import model_server_config_pb2

    server, base = repository
    (base / "k" / "1").mkdir(parents=True)
    (base / "k" / "1" / "model.joblib").write_bytes(b"not a pickle")  # sklearn's load() fails
    config = model_server_config_pb2.ModelServerConfig()
    config.model_config_list.config.add(name="m", base_path=str(base / "m"))
    config.model_config_list.config.add(name="k", base_path=str(base / "k"))
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        with pytest.raises(grpc.RpcError) as error:
            stub.HandleReloadConfigRequest(
                model_management_pb2.ReloadConfigRequest(config=config), TIMEOUT
            )
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "k version 1: " in error.value.details()
    assert "the running config is unchanged" in error.value.details()
    for model in ("m", "n"):  # n, absent from the new config, still serves
        assert httpx.post(f"{server.url}/v2/models/{model}/infer", json=BODY).status_code == 200


WITHOUT_TENSORFLOW = """
import sys
sys.modules["tensorflow"] = None  # as if TensorFlow were not installed
from mlserve.cli import main
main(["serve", *sys.argv[1:]])
"""


def test_a_tensorflow_model_without_tensorflow_says_what_to_install(tmp_path: Path) -> None:
    """A TensorFlow version that arrives once the server runs (``mlserve serve`` refuses
    a repository that needs TensorFlow at start) answers 503 with the extra to install."""
    base = tmp_path / "models"
    write_version(base, "m", 1, bias=1)
    config = write_config(tmp_path / "config.yaml", [{"name": "m"}])
    http_port, grpc_port = free_port(), free_port()
    args = ["--model-config", str(config), "--poll-interval", "0", "--model-control-mode"]
    args += ["explicit", "--port", str(http_port), "--grpc-port", str(grpc_port)]
    command = [sys.executable, "-c", WITHOUT_TENSORFLOW, str(base), *args]
    with (tmp_path / "server.log").open("wb") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
    server = ServerProcess(proc, http_port, grpc_port)
    reason = (
        "ImportError: tensorflow is needed to serve this model but is not installed: "
        "pip install 'mlserve[tensorflow]'"
    )
    try:
        wait_for_port(grpc_port, timeout=60, proc=proc)
        wait_for_port(http_port, timeout=60, proc=proc)
        (base / "t" / "1").mkdir(parents=True)
        (base / "t" / "1" / "saved_model.pb").write_bytes(b"")
        answer = httpx.post(f"{server.url}/v2/repository/models/t/load", json={})
        assert answer.status_code == 503
        assert answer.json() == {"error": f"ModelNotReady: failed to load 't', version 1: {reason}"}
        answer = httpx.post(f"{server.url}/v2/models/t/infer", json=BODY)
        assert answer.status_code == 503
        assert answer.json() == {
            "error": f"ModelNotReady: model t failed to load: version 1: {reason}"
        }
        client = grpcclient.InferenceServerClient(server.grpc_address)
        with pytest.raises(InferenceServerException) as error:
            client.infer("t", _x())
        assert error.value.status() == "StatusCode.UNAVAILABLE"
        assert "pip install 'mlserve[tensorflow]'" in error.value.message()
    finally:
        assert server.stop() == 0
    lines = (tmp_path / "server.log").read_text().splitlines()
    failed = [i for i, line in enumerate(lines) if "failed to load model t version 1 after" in line]
    assert len(failed) == 1, lines
    assert lines[failed[0]].endswith(reason)
    assert not lines[failed[0] + 1].startswith("Traceback")  # one line says it all
