"""A tiny model kind for repository tests: ``model.json`` holds a linear model.

``{"weights": [w1, ...], "bias": b}``; ``predict`` returns ``x . w + b`` per
row. A request's ``parameters.delay`` makes it slow (in-flight tests); the
class records every load and unload so tests can check when they happened.
Beside it, the helpers that write versions and watch a served repository.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from mlserve import V2ModelServer
from mlserve.server.graph_server import GraphServer

CLASS_NAME = "tests.repository.fixtures.LinearModel"
BODY = {"inputs": [[1.0, 2.0]]}


class LinearModel(V2ModelServer):
    events: list[tuple[str, str]] = []
    _lock = threading.Lock()

    @classmethod
    def record(cls, what: str, key: str) -> None:
        with cls._lock:
            cls.events.append((what, key))

    @classmethod
    def count(cls, what: str, key: str | None = None) -> int:
        with cls._lock:
            return sum(1 for w, k in cls.events if w == what and (key is None or k == key))

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls.events.clear()

    @property
    def key(self) -> str:
        return f"{self.name}:{self.version}"

    def load(self) -> None:
        spec = json.loads(Path(self.get_model("model.json")[0]).read_text())
        time.sleep(float(spec.get("load_seconds", 0)))  # a slow load (and warm-up)
        self.model = spec
        self.record("load", self.key)

    def unload(self) -> None:
        self.record("unload", self.key)

    def predict(self, request: dict[str, Any]) -> list[float]:
        delay = float((request.get("parameters") or {}).get("delay", 0))
        if delay:
            time.sleep(delay)
        weights, bias = self.model["weights"], self.model["bias"]
        return [
            sum(w * x for w, x in zip(weights, row, strict=True)) + bias
            for row in request["inputs"]
        ]


def write_version(
    base: Path,
    model: str,
    version: int,
    bias: float,
    weights: list[float] | None = None,
    load_seconds: float = 0,
) -> Path:
    """Write a version folder atomically: into a hidden folder, then renamed."""
    folder = base / model / str(version)
    staging = base / model / f".{version}.partial"
    staging.mkdir(parents=True)
    spec = {"weights": weights or [1.0, 1.0], "bias": bias, "load_seconds": load_seconds}
    (staging / "model.json").write_text(json.dumps(spec))
    os.rename(staging, folder)
    return folder


def remove_version(base: Path, model: str, version: int) -> None:
    shutil.rmtree(base / model / str(version))


def wait_until(condition: Any, timeout: float = 15.0, interval: float = 0.02) -> None:
    """Wait for ``condition()`` to be true; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met in {timeout}s")


def infer(server: GraphServer, path: str = "/v2/models/m/infer", **params: Any) -> dict[str, Any]:
    body = {**BODY, "parameters": params} if params else BODY
    return server.test(path, body=body)  # type: ignore[no-any-return]


def version_of(server: GraphServer, model: str = "m") -> str:
    return str(infer(server, f"/v2/models/{model}/infer")["model_version"])


def states(server: GraphServer) -> dict[str, tuple[str, str]]:
    return {
        f"{e['name']}:{e['version']}": (e["state"], e["reason"]) for e in server.repository.index()
    }


class LoadGenerator:
    """Threads sending requests to ``m`` through the server; counts what fails."""

    def __init__(self, server: GraphServer, threads: int = 4) -> None:
        self.server = server
        self.versions: list[str] = []
        self.failures: list[Any] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send, daemon=True) for _ in range(threads)]

    def _send(self) -> None:
        while not self._stop.is_set():
            response = self.server.test("/v2/models/m/infer", body=BODY, silent=True)
            if isinstance(response, dict):
                self.versions.append(response["model_version"])
            else:
                self.failures.append(response.body)

    def __enter__(self) -> LoadGenerator:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
