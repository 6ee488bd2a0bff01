"""The TF Serving path end to end: a repository of SavedModels served by the real
TFModelServer, configured in TF Serving's own model_config_list format, reached
through the /v1 REST API (versions, labels) and V2, and hot-reloaded."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlserve.repository import function_from_repository
from mlserve.server.graph_server import GraphServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tf_repository" / "half_plus_two"

CONFIG = """
model_config_list {
  config {
    name: 'half_plus_two'
    base_path: '%s'
    model_platform: 'tensorflow'
    model_version_policy { all {} }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 2 }
  }
}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GraphServer]:
    base = tmp_path / "half_plus_two"
    for version in ("1", "2"):
        shutil.copytree(EXAMPLE / version, base / version)
    config = tmp_path / "models.config"
    config.write_text(CONFIG % base)
    server = function_from_repository(model_config=config, poll_interval=0.1).to_mock_server()
    yield server
    server.wait_for_completion()


def predictions(server: GraphServer, path: str) -> list[float]:
    return server.test(path, body={"instances": [2.0, 4.0]})["predictions"]  # type: ignore[no-any-return]


def test_versions_and_labels_over_the_tf_serving_api(server: GraphServer) -> None:
    v1 = predictions(server, "/v1/models/half_plus_two/versions/1:predict")
    v2 = predictions(server, "/v1/models/half_plus_two/versions/2:predict")
    assert v1 != v2
    assert predictions(server, "/v1/models/half_plus_two/labels/stable:predict") == v1
    assert predictions(server, "/v1/models/half_plus_two/labels/canary:predict") == v2
    assert (
        predictions(server, "/v1/models/half_plus_two:predict") == v2
    )  # the highest served version
    status = server.test("/v1/models/half_plus_two")["model_version_status"]
    assert [(s["version"], s["state"]) for s in status] == [("1", "AVAILABLE"), ("2", "AVAILABLE")]
    unknown = server.test(
        "/v1/models/half_plus_two/labels/nope:predict", body={"instances": [1.0]}, silent=True
    )
    assert unknown.status_code == 404


def test_v2_metadata_of_a_repository_version_comes_from_the_signature(server: GraphServer) -> None:
    meta = server.test("/v2/models/half_plus_two/versions/1")
    assert meta["platform"] == "tensorflow_savedmodel"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1]}]
    assert meta["versions"] == ["1", "2"]


def test_a_new_version_serves_after_hot_reload(server: GraphServer, tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE / "2", tmp_path / "staging")
    (tmp_path / "staging").rename(
        tmp_path / "half_plus_two" / "3"
    )  # appears atomically, as TF Serving asks
    deadline = time.monotonic() + 30
    while "half_plus_two:3" not in server.test("/v2/models")["models"]:
        assert time.monotonic() < deadline, "version 3 was not loaded"
        time.sleep(0.1)
    status = server.test("/v1/models/half_plus_two/versions/3")["model_version_status"]
    assert status[0]["state"] == "AVAILABLE"
    assert predictions(server, "/v1/models/half_plus_two/versions/3:predict") == predictions(
        server, "/v1/models/half_plus_two/versions/2:predict"
    )
