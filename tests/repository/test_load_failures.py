"""Repository loads that fail, in-process: the model answers 503 with the reason (not
404), a load on request raises while the version before serves on, and a config
reload with a failing load changes nothing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from mlserve.protocol.errors import ModelNotReady
from mlserve.repository.config import parse_config
from tests.repository.fixtures import LinearModel, wait_until, write_version

BODY = {"inputs": [[1.0, 2.0]]}


def broken_version(base: Path, model: str, version: int) -> None:
    (base / model / str(version)).mkdir(parents=True)
    (base / model / str(version) / "model.json").write_text("not json")


def test_a_model_that_failed_to_load_answers_503_with_the_reason(
    repo: Path, serve_repo: Any
) -> None:
    broken_version(repo, "b", 1)
    server = serve_repo(repo, [{"name": "m"}, {"name": "b"}])
    reason = "ModelNotReady: model b failed to load: version 1: JSONDecodeError: "
    for path, body in [
        ("/v2/models/b/infer", BODY),
        ("/v2/models/b", None),
        ("/v2/models/b/ready", None),
    ]:
        failed = server.test(path, body=body, method="POST" if body else "GET", silent=True)
        assert failed.status_code == 503, path
        assert failed.body["error"].startswith(reason)
    failed = server.test("/v2/models/b/versions/1/infer", body=BODY, silent=True)
    assert failed.status_code == 503
    assert failed.body["error"].startswith(
        "ModelNotReady: model b version 1 failed to load: JSONDecodeError: "
    )
    assert server.test("/v2/models/zz/infer", body=BODY, silent=True).status_code == 404
    assert server.test("/v2/models/m/versions/7/infer", body=BODY, silent=True).status_code == 404
    asyncio.run(server.repository.unload("b"))  # unloaded on request: gone, a 404
    assert server.test("/v2/models/b/infer", body=BODY, silent=True).status_code == 404


def test_a_model_still_loading_answers_503(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo, [{"name": "m"}, {"name": "slow"}], poll_interval=0)
    write_version(repo, "slow", 1, bias=0, load_seconds=1)
    loading = threading.Thread(target=server.repository.load_model, args=("slow",))
    loading.start()
    try:
        wait_until(lambda: ("slow", 1) in server.repository.loading)
        failed = server.test("/v2/models/slow/infer", body=BODY, silent=True)
        assert (failed.status_code, failed.body) == (
            503,
            {"error": "ModelNotReady: model slow is loading"},
        )
    finally:
        loading.join()
    assert server.test("/v2/models/slow/infer", body=BODY)["model_version"] == "1"


def test_a_load_on_request_that_fails_raises_and_the_version_before_serves_on(
    repo: Path, serve_repo: Any
) -> None:
    server = serve_repo(repo, poll_interval=0)
    broken_version(repo, "m", 3)
    with pytest.raises(ModelNotReady) as error:
        asyncio.run(server.repository.load("m"))
    message = str(error.value)
    assert message.startswith("failed to load 'm', version 3: JSONDecodeError: ")
    assert message.endswith("; still serving version 2")
    assert server.test("/v2/models/m/infer", body=BODY)["model_version"] == "2"
    assert server.test("/v2/models/m/versions/3/infer", body=BODY, silent=True).status_code == 503


def test_a_config_reload_with_a_failing_version_changes_nothing(
    repo: Path, serve_repo: Any
) -> None:
    write_version(repo, "n", 1, bias=10)
    write_version(repo, "n", 2, bias=20)
    broken_version(repo, "k", 1)
    write_version(repo, "k", 2, bias=30)
    server = serve_repo(repo, [{"name": "m"}])
    repository = server.repository
    entry = "  - {name: %s, class_name: tests.repository.fixtures.LinearModel%s}\n"
    text = "models:\n" + entry % ("n", "") + entry % ("k", ", version_policy: all")
    with pytest.raises(ModelNotReady) as error:  # k:2 and n:2 load, k:1 fails
        repository.replace_config(parse_config(text, repo))
    assert str(error.value).startswith("failed to load the new config (k version 1: ")
    assert str(error.value).endswith("; the running config is unchanged")
    assert server.test("/v2/models/", method="GET") == {"models": ["m:2"]}
    for key in ("k:2", "n:2"):  # loaded for the new config, unloaded again
        assert LinearModel.count("load", key) == LinearModel.count("unload", key) == 1
