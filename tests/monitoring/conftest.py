"""Toy models and helpers for the monitoring tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve.model import V2ModelServer
from mlserve.server.graph_server import GraphServer


class SumModel(V2ModelServer):
    """Sums each row; sets a metric when asked to."""

    def load(self) -> None:
        self.model = "sum"

    def predict(self, request: dict[str, Any]) -> Any:
        if self.get_param("metric"):
            self.set_metric("rows", len(request["inputs"]))
        return np.asarray(request["inputs"]).sum(axis=-1)


class FailingModel(V2ModelServer):
    def load(self) -> None:
        self.model = "fail"

    def predict(self, request: dict[str, Any]) -> Any:
        raise ValueError("no luck")


class SlowModel(V2ModelServer):
    def load(self) -> None:
        self.model = "slow"

    def predict(self, request: dict[str, Any]) -> Any:
        time.sleep(1.1)
        return [0]


class HiddenModel(SumModel):
    """Logs fixed stand-ins instead of its real inputs and outputs."""

    def logged_results(self, request: Any, response: Any, op: str) -> tuple[Any, Any]:
        return [["hidden"]], ["secret"]


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def tracked_server(
    stream: str | None,
    models: dict[str, Any] | None = None,
    track_models: bool = False,
    parameters: dict[str, Any] | None = None,
    name: str = "fn",
    project: str = "proj",
    **tracking: Any,
) -> GraphServer:
    """A mock server of a function with set_tracking(stream, **tracking) and ``models``."""
    fn = mlserve.new_function(name, project=project)
    for key, cls in (models or {"m1": SumModel}).items():
        fn.add_model(key, class_name=cls)
    fn.spec.parameters.update(parameters or {})
    fn.set_tracking(stream, **tracking)
    return fn.to_mock_server(track_models=track_models)


def wait_for(condition: Callable[[], Any], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Embedded data (default stream file, SQLite store) goes to a temp folder."""
    monkeypatch.setenv("MLSERVE_DATA_DIR", str(tmp_path / "mlserve-data"))
    monkeypatch.delenv("MLSERVE_ENDPOINT_STORE", raising=False)
    yield tmp_path / "mlserve-data"


@pytest.fixture
def make_server() -> Iterator[Callable[..., GraphServer]]:
    """``tracked_server``, shut down (streams flushed, threads stopped) after the test."""
    made: list[GraphServer] = []

    def make(*args: Any, **kwargs: Any) -> GraphServer:
        server = tracked_server(*args, **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.wait_for_completion()
