from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlserve.repository import function_from_repository
from mlserve.server.graph_server import GraphServer
from tests.repository.fixtures import CLASS_NAME, LinearModel, write_version


def write_config(path: Path, models: list[dict[str, Any]]) -> Path:
    import yaml

    entries = [{"class_name": CLASS_NAME, **model} for model in models]
    path.write_text(yaml.safe_dump({"models": entries}))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository: model ``m`` with versions 1 and 2 (bias 1 and 2)."""
    base = tmp_path / "models"
    for version in (1, 2):
        write_version(base, "m", version, bias=version)
    LinearModel.reset()
    return base


@pytest.fixture
def serve_repo(tmp_path: Path) -> Iterator[Callable[..., GraphServer]]:
    """Start a mock server of a repository (stopped at teardown)."""
    servers: list[GraphServer] = []

    def start(
        base: Path, models: list[dict[str, Any]] | None = None, **options: Any
    ) -> GraphServer:
        config = write_config(tmp_path / "config.yaml", models or [{"name": "m"}])
        options.setdefault("poll_interval", 0.1)
        options.setdefault("version_quiet_period", 0.2)  # the tests' writes are atomic
        server = function_from_repository(base, model_config=config, **options).to_mock_server()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.wait_for_completion()
