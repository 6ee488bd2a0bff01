"""The repository through a server: policies, labels, the extension, hot reload."""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlserve.protocol.errors import ModelNotFound, ModelNotReady
from tests.repository.conftest import write_config
from tests.repository.fixtures import (
    BODY,
    LinearModel,
    LoadGenerator,
    infer,
    remove_version,
    states,
    version_of,
    wait_until,
    write_version,
)


def test_latest_serves_the_highest_version(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo)
    answer = infer(server)
    assert answer["model_name"] == "m" and answer["model_version"] == "2"
    assert answer["outputs"] == [5.0]  # 1 + 2 + bias 2
    assert infer(server, "/v2/models/m/versions/2/infer")["outputs"] == [5.0]
    assert (
        server.test(
            "/v2/models/m/versions/1/infer", body=BODY, silent=True, get_body=False
        ).status_code
        == 404
    )
    assert server.test("/", body={"model": "m", **BODY})["model_version"] == "2"
    assert server.test("/v2/models/m")["versions"] == ["2"]
    assert server.test("/v2/models/", method="GET") == {"models": ["m:2"]}
    assert server.test("/v2/health/ready", method="GET") == {"ready": True}
    assert LinearModel.count("load") == 1
    assert states(server) == {
        "m:1": ("UNAVAILABLE", "not in the version policy"),
        "m:2": ("READY", ""),
    }


def test_specific_versions_and_labels(repo: Path, serve_repo: Any) -> None:
    write_version(repo, "m", 3, bias=3)
    server = serve_repo(
        repo,
        [
            {
                "name": "m",
                "version_policy": {"specific": {"versions": [1, 2]}},
                "labels": {"stable": 1, "canary": 2, "next": 3},
            }
        ],
    )
    assert version_of(server) == "2"
    assert infer(server, "/v2/models/m/versions/1/infer")["outputs"] == [4.0]
    assert server.repository.resolve_label("m", "stable") == "1"
    assert server.repository.resolve_label("m", "canary") == "2"
    with pytest.raises(ModelNotReady):
        server.repository.resolve_label("m", "next")
    with pytest.raises(ModelNotFound):
        server.repository.resolve_label("m", "nightly")
    with pytest.raises(ModelNotFound):
        server.repository.resolve_label("other", "stable")


def test_latest_n_and_all(repo: Path, serve_repo: Any) -> None:
    write_version(repo, "m", 3, bias=3)
    shutil.copytree(repo / "m", repo / "n")
    server = serve_repo(
        repo,
        [
            {"name": "m", "version_policy": {"latest": {"num_versions": 2}}},
            {"name": "n", "version_policy": "all"},
        ],
    )
    listed = server.test("/v2/models/", method="GET")["models"]
    assert listed == ["m:2", "m:3", "n:1", "n:2", "n:3"]
    assert version_of(server, "m") == "3" and version_of(server, "n") == "3"


def test_repository_extension_unload_and_load(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo)
    asyncio.run(server.repository.unload("m"))
    assert (
        server.test("/v2/models/m/infer", body=BODY, silent=True, get_body=False).status_code == 404
    )
    assert states(server)["m:2"] == ("UNAVAILABLE", "unloaded")
    assert LinearModel.count("unload", "m:2") == 1
    time.sleep(0.3)  # polls leave an unloaded model alone
    assert LinearModel.count("load") == 1
    assert server.test("/v2/health/ready", method="GET") == {"ready": True}
    asyncio.run(server.repository.load("m"))
    assert version_of(server) == "2" and LinearModel.count("load", "m:2") == 2
    with pytest.raises(ModelNotFound):
        asyncio.run(server.repository.load("missing"))
    with pytest.raises(ModelNotFound):
        asyncio.run(server.repository.unload("missing"))


def test_extension_loads_a_model_folder_outside_the_config(repo: Path, serve_repo: Any) -> None:
    shutil.copytree(repo / "m", repo / "extra")
    server = serve_repo(repo)
    assert (
        server.test("/v2/models/extra/infer", body=BODY, silent=True, get_body=False).status_code
        == 404
    )
    with pytest.raises(ModelNotReady, match="set class_name"):  # found, but no class detected
        asyncio.run(server.repository.load("extra"))
    assert states(server)["extra:2"][0] == "UNAVAILABLE"


def test_new_version_serves_after_its_load_with_no_failed_request(
    repo: Path, serve_repo: Any
) -> None:
    server = serve_repo(repo)
    with LoadGenerator(server) as load:
        wait_until(lambda: len(load.versions) > 50)
        write_version(repo, "m", 3, bias=3, load_seconds=0.3)  # a slow load: warm-up
        wait_until(lambda: "3" in load.versions[-20:])
        assert LinearModel.count("load", "m:3") == 1
        switched = len(load.versions)
        wait_until(lambda: len(load.versions) > switched + 50)
    assert load.failures == []
    first_new = load.versions.index("3")
    assert set(load.versions[:first_new]) == {"2"}
    assert set(load.versions[first_new + 20 :]) == {"3"}
    wait_until(lambda: LinearModel.count("unload", "m:2") == 1)
    assert states(server)["m:3"] == ("READY", "")


def test_a_retired_version_finishes_its_requests_first(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo)
    slow: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: slow.update(infer(server, delay=1.0)))
    thread.start()
    wait_until(lambda: server.graph.object.routes["m:2"].inflight == 1)
    write_version(repo, "m", 3, bias=3)
    wait_until(lambda: states(server).get("m:2") == ("UNAVAILABLE", "unloading"))
    assert version_of(server) == "3"
    assert LinearModel.count("unload", "m:2") == 0  # still answering
    thread.join()
    assert slow["model_version"] == "2" and slow["outputs"] == [5.0]
    wait_until(lambda: LinearModel.count("unload", "m:2") == 1)
    assert states(server)["m:2"] == ("UNAVAILABLE", "not in the version policy")


def test_removing_a_version_or_a_model_unloads_it(repo: Path, serve_repo: Any) -> None:
    shutil.copytree(repo / "m", repo / "n")
    server = serve_repo(repo, [{"name": "m"}, {"name": "n"}])
    remove_version(repo, "m", 2)  # back to version 1
    wait_until(lambda: version_of(server) == "1")
    wait_until(lambda: LinearModel.count("unload", "m:2") == 1)
    shutil.rmtree(repo / "n")
    wait_until(
        lambda: (
            server.test("/v2/models/n/infer", body=BODY, silent=True, get_body=False).status_code
            == 404
        )
    )
    wait_until(lambda: LinearModel.count("unload", "n:2") == 1)


def test_config_changes_are_polled(repo: Path, serve_repo: Any, tmp_path: Path) -> None:
    shutil.copytree(repo / "m", repo / "n")
    server = serve_repo(repo)
    config = tmp_path / "config.yaml"
    time.sleep(0.01)  # a new mtime
    write_config(config, [{"name": "n", "version_policy": "all"}])
    wait_until(lambda: server.test("/v2/models/", method="GET")["models"] == ["n:1", "n:2"])
    wait_until(lambda: LinearModel.count("unload", "m:2") == 1)
    config.write_text("models: [{name: broken")  # an invalid config keeps the previous one
    time.sleep(0.3)
    assert version_of(server, "n") == "2"


def test_a_version_is_loaded_only_once_its_folder_is_stable(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo)
    (repo / "m" / "3").mkdir()  # copied in place, not renamed: files still to come
    time.sleep(0.4)
    assert version_of(server) == "2" and LinearModel.count("load", "m:3") == 0
    (repo / "m" / "3" / "model.json").write_text('{"weights": [1, 1], "bias": 3}')
    wait_until(lambda: version_of(server) == "3")


def test_a_failing_version_keeps_the_previous_one_serving(repo: Path, serve_repo: Any) -> None:
    server = serve_repo(repo)
    (repo / "m" / ".3").mkdir()
    (repo / "m" / ".3" / "model.json").write_text("not json")
    (repo / "m" / ".3").rename(repo / "m" / "3")
    wait_until(
        lambda: (
            states(server)["m:3"][0] == "UNAVAILABLE"
            and "JSONDecodeError" in states(server)["m:3"][1]
        )
    )
    time.sleep(0.3)  # not retried while the folder is unchanged
    assert version_of(server) == "2" and LinearModel.count("load", "m:2") == 1
    remove_version(repo, "m", 3)
    write_version(repo, "m", 3, bias=3)
    wait_until(lambda: version_of(server) == "3")


def test_models_added_to_the_function_serve_beside_the_repository(
    repo: Path, tmp_path: Path
) -> None:
    from mlserve.repository import function_from_repository
    from tests.repository.fixtures import CLASS_NAME

    config = write_config(tmp_path / "config.yaml", [{"name": "m"}])
    fn = function_from_repository(repo, model_config=config, poll_interval=0)
    fn.add_model("static", model_path=str(repo / "m" / "1"), class_name=CLASS_NAME)
    server = fn.to_mock_server()
    try:
        assert server.test("/v2/models/static/infer", body=BODY)["outputs"] == [4.0]
        assert version_of(server) == "2"
        assert server.test("/v2/models/", method="GET") == {"models": ["m:2", "static"]}
        assert server.test("/v2/health/ready", method="GET") == {"ready": True}
    finally:
        server.wait_for_completion()


def test_a_failed_config_reload_changes_nothing(repo: Path, serve_repo: Any) -> None:
    """TF Serving's config reload is all or nothing: a model that serves no version under
    the new config (no such folder, a failing load) leaves the running config serving."""
    from mlserve.repository.config import parse_config

    write_version(repo, "n", 1, bias=10)
    write_version(repo, "k", 1, bias=20)
    (repo / "bad" / "1").mkdir(parents=True)
    (repo / "bad" / "1" / "model.json").write_text("not json")
    server = serve_repo(repo, [{"name": "m"}, {"name": "n"}])
    repository = server.repository
    assert (version_of(server), version_of(server, "n")) == ("2", "1")
    running = dict(repository.configs)

    def reload(text: str) -> None:
        repository.replace_config(parse_config(text, repo))

    entry = "  - {name: %s, class_name: tests.repository.fixtures.LinearModel%s}\n"
    for broken in ("ghost", "bad"):  # the folder is missing / its only version fails to load
        text = "models:\n" + entry % ("m", ", version_policy: all") + entry % ("k", "")
        with pytest.raises(ModelNotReady, match=f"{broken}.*unchanged"):
            reload(text + entry % (broken, ""))
        assert repository.configs == running
        assert (version_of(server), version_of(server, "n")) == ("2", "1")
        assert server.test("/v2/models/", method="GET") == {"models": ["m:2", "n:1"]}
        assert LinearModel.count("unload", "m:2") == LinearModel.count("unload", "n:1") == 0
        # what was loaded for the new config is unloaded again, never served
        assert LinearModel.count("load", "k:1") == LinearModel.count("unload", "k:1") > 0
        assert LinearModel.count("load", "m:1") == LinearModel.count("unload", "m:1") > 0
        assert "k" not in {e["name"] for e in repository.index()}

    # a good config switches: new versions serve, what it leaves out retires
    reload(
        "models:\n"
        + entry % ("m", ", version_policy: {specific: {versions: [1]}}")
        + entry % ("k", "")
    )
    assert (version_of(server), version_of(server, "k")) == ("1", "1")
    assert server.test("/v2/models/", method="GET") == {"models": ["k:1", "m:1"]}
    wait_until(lambda: LinearModel.count("unload", "n:1") == 1)
    wait_until(lambda: LinearModel.count("unload", "m:2") == 1)
