"""A version folder loads only when complete (docs/repository.md#hot-reload): unchanged
for the quiet period, whatever the poll interval; holding its done file when one is
asked for; with a SavedModel's variables index and data shards. And TF Serving's view
of a version whose load failed: state END with the reason, as TF Serving answers."""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from mlserve.cli import main
from mlserve.protocol.errors import ModelNotReady
from mlserve.repository import function_from_repository
from mlserve.repository.layout import check_done_file, incomplete
from mlserve.repository.router import QUIET_PERIOD_ENV
from tests.netserver import ROOT, start_server
from tests.repository.conftest import write_config
from tests.repository.fixtures import (
    CLASS_NAME,
    LinearModel,
    LoadGenerator,
    states,
    version_of,
    wait_until,
    write_version,
)

SAVED_MODEL = ROOT / "examples" / "tf_repository" / "half_plus_two" / "1"
SHARD = "variables/variables.data-00000-of-00001"
TIMEOUT = 60.0  # the first TF Serving call imports TensorFlow in the server


def write_in_chunks(folder: Path, text: str, stalls: int, stall: float) -> list[int]:
    """Copy ``model.json`` into ``folder`` in place, in ``stalls + 1`` chunks with a
    pause after each but the last; returns how often ``m:3`` had loaded at each pause."""
    folder.mkdir()
    size = len(text) // (stalls + 1) + 1
    chunks = [text[at : at + size] for at in range(0, len(text), size)]
    loads = []
    with (folder / "model.json").open("w") as file:
        for chunk in chunks[:-1]:
            file.write(chunk)
            file.flush()
            time.sleep(stall)  # a copy that pauses: longer than several polls
            loads.append(LinearModel.count("load", "m:3"))
        file.write(chunks[-1])
    return loads


def test_a_copy_that_stalls_longer_than_several_polls_loads_only_once_complete(
    repo: Path, serve_repo: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mlserve")
    server = serve_repo(repo, poll_interval=0.2, version_quiet_period=2.0)
    spec = {"weights": [1.0, 1.0], "bias": 3, "padding": "x" * 4000}
    loads: list[int] = []
    reasons: list[str] = []
    with LoadGenerator(server) as load:
        wait_until(lambda: len(load.versions) > 20)
        writer = threading.Thread(
            target=lambda: loads.extend(
                write_in_chunks(repo / "m" / "3", json.dumps(spec), stalls=2, stall=1.0)
            )
        )
        writer.start()
        while writer.is_alive():  # what the index says while the copy is under way
            reason = states(server).get("m:3", ("", ""))[1]
            reasons.append(reason)
            time.sleep(0.05)
        writer.join()
        wait_until(lambda: "3" in load.versions[-20:], timeout=30)
        switched = len(load.versions)
        wait_until(lambda: len(load.versions) > switched + 20)
    assert load.failures == []
    first_new = load.versions.index("3")
    assert set(load.versions[:first_new]) == {"2"}  # the old version served throughout
    assert LinearModel.count("load", "m:3") == 1
    assert not [r.getMessage() for r in caplog.records if "failed to load" in r.getMessage()]
    assert loads == [0, 0]  # not loaded at any pause of the copy
    assert "being written: loads once unchanged for 2 s" in reasons
    assert states(server)["m:3"] == ("READY", "")


def write_saved_model(folder: Path, parts: list[str]) -> None:
    """A version holding ``model.json`` (served by ``LinearModel``) beside the given
    parts of a real SavedModel, renamed into place."""
    staging = folder.parent / f".{folder.name}"
    (staging / "variables").mkdir(parents=True)
    (staging / "model.json").write_text(json.dumps({"weights": [1, 1], "bias": 3}))
    for part in parts:
        shutil.copy(SAVED_MODEL / part, staging / part)
    staging.rename(folder)


def test_a_saved_model_waits_for_its_variables_index_and_shards(
    repo: Path, serve_repo: Any
) -> None:
    version = repo / "m" / "3"
    write_saved_model(version, ["saved_model.pb"])
    server = serve_repo(repo)  # found at start-up: it waits all the same
    assert version_of(server) == "2"
    assert states(server)["m:3"] == (
        "UNAVAILABLE",
        "incomplete: waiting for variables/variables.index",
    )
    shutil.copy(SAVED_MODEL / "variables" / "variables.index", version / "variables")
    wait_until(lambda: states(server)["m:3"][1] == f"incomplete: waiting for {SHARD}")
    assert version_of(server) == "2" and LinearModel.count("load", "m:3") == 0
    shutil.copy(SAVED_MODEL / SHARD, version / "variables")
    wait_until(lambda: version_of(server) == "3")


def test_a_done_file_gates_a_version(repo: Path, serve_repo: Any) -> None:
    (repo / "m" / "2" / "DONE").touch()
    server = serve_repo(repo, [{"name": "m", "done_file": "DONE"}])
    assert version_of(server) == "2"
    assert states(server)["m:1"] == ("UNAVAILABLE", "incomplete: waiting for DONE")
    write_version(repo, "m", 3, bias=3)
    wait_until(lambda: states(server)["m:3"][1] == "incomplete: waiting for DONE")
    time.sleep(0.5)  # polls come and go: it still waits
    assert version_of(server) == "2" and LinearModel.count("load", "m:3") == 0
    (repo / "m" / "3" / "DONE").touch()
    wait_until(lambda: version_of(server) == "3")


def test_a_global_done_file_and_a_load_on_request_that_waits(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo, [{"name": "m"}], version_done_file=".complete", poll_interval=0)
    assert states(server)["m:2"] == ("UNAVAILABLE", "incomplete: waiting for .complete")
    with pytest.raises(ModelNotReady, match=r"version 2: incomplete: waiting for \.complete"):
        server.repository.load_model("m")
    (repo / "m" / "2" / ".complete").touch()
    server.repository.load_model("m")
    assert version_of(server) == "2"


def test_the_layout_tells_what_a_version_lacks(tmp_path: Path) -> None:
    copy = tmp_path / "1"
    shutil.copytree(SAVED_MODEL, copy)
    assert incomplete(copy) is None
    assert incomplete(copy, "DONE") == "DONE"
    index = copy / "variables" / "variables.index"
    whole = index.read_bytes()
    index.write_bytes(whole[:4])  # cut inside its header: still being copied
    assert incomplete(copy) == "variables/variables.index"
    index.write_bytes(whole)
    (copy / SHARD).unlink()
    assert incomplete(copy) == SHARD
    shutil.rmtree(copy / "variables")  # a SavedModel without variables is whole
    assert incomplete(copy) is None
    for bad in ("", "/tmp/DONE", "../DONE", 3):
        with pytest.raises(ValueError, match="done_file must be a file name"):
            check_done_file(bad)


def test_the_quiet_period_from_the_environment_and_the_command_line(
    repo: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path / "config.yaml", [{"name": "m"}])

    def quiet_period() -> float:
        fn = function_from_repository(repo, model_config=config, poll_interval=0)
        server = fn.to_mock_server()
        try:
            return float(server.repository.quiet_period)
        finally:
            server.wait_for_completion()

    monkeypatch.delenv(QUIET_PERIOD_ENV, raising=False)
    assert quiet_period() == 2.0
    monkeypatch.setenv(QUIET_PERIOD_ENV, "0.5")
    assert quiet_period() == 0.5
    monkeypatch.setenv(QUIET_PERIOD_ENV, "soon")
    with pytest.raises(ValueError, match="MLSERVE_VERSION_QUIET_PERIOD='soon': give a number"):
        quiet_period()
    with pytest.raises(SystemExit) as exit_code:
        main(["serve", str(repo), "--version-quiet-period", "-1"])
    assert exit_code.value.code == 2
    assert "the version quiet period is 0 or more seconds, got -1.0" in capsys.readouterr().err
    monkeypatch.delenv(QUIET_PERIOD_ENV)
    with pytest.raises(SystemExit):
        main(["serve", str(repo), "--version-done-file", "../DONE"])
    assert "done_file must be a file name inside the version folder" in capsys.readouterr().err


def test_tf_serving_reports_a_version_that_failed_to_load(repo: Path, tmp_path: Path) -> None:
    """REST and gRPC (TF Serving's own stubs) answer END with the reason, by version
    and among the model's versions, as TF Serving does; hidden under --hide-errors."""
    pytest.importorskip("tensorflow_serving")
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    State = get_model_status_pb2.ModelVersionStatus.State
    (repo / "m" / "3").mkdir()
    (repo / "m" / "3" / "model.json").write_text("not json")
    models = [{"name": "m", "class_name": CLASS_NAME, "version_policy": "all"}]
    config = write_config(tmp_path / "config.yaml", models)
    server = start_server("--model-config", str(config), target=str(repo))
    try:
        answer = httpx.get(f"{server.url}/v1/models/m/versions/3", timeout=TIMEOUT)
        assert answer.status_code == 200, answer.text
        (status,) = answer.json()["model_version_status"]
        assert (status["version"], status["state"]) == ("3", "END")
        assert status["status"]["error_code"] == "UNKNOWN"
        assert status["status"]["error_message"].startswith("JSONDecodeError: ")
        listed = httpx.get(f"{server.url}/v1/models/m", timeout=TIMEOUT).json()
        assert [(s["version"], s["state"]) for s in listed["model_version_status"]] == [
            ("1", "AVAILABLE"),
            ("2", "AVAILABLE"),
            ("3", "END"),
        ]
        with grpc.insecure_channel(server.grpc_address) as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "m"
            request.model_spec.version.value = 3
            (version,) = stub.GetModelStatus(request, TIMEOUT).model_version_status
            assert (version.version, version.state) == (3, State.END)
            assert version.status.error_code == 2  # UNKNOWN
            assert version.status.error_message.startswith("JSONDecodeError: ")
            request.model_spec.ClearField("version")
            answer = stub.GetModelStatus(request, TIMEOUT)
            assert [(v.version, v.state) for v in answer.model_version_status] == [
                (1, State.AVAILABLE),
                (2, State.AVAILABLE),
                (3, State.END),
            ]
    finally:
        assert server.stop() == 0
    fn = function_from_repository(repo, model_config=config, poll_interval=0)
    hiding = fn.to_mock_server(hide_errors=True)
    try:
        answer = hiding.test("/v1/models/m/versions/3", method="GET")
        (status,) = answer["model_version_status"]
        assert status["state"] == "END"
        assert status["status"]["error_message"].startswith("internal error, error id ")
        unknown = hiding.test("/v1/models/m/versions/4", method="GET", silent=True, get_body=False)
        assert unknown.status_code == 404
    finally:
        hiding.wait_for_completion()
