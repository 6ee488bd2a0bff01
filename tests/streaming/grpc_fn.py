"""The function the gRPC and Kafka stream tests serve: models that stream.

Each streaming model reads one INT64 input ``[count, tag]``: ``count`` chunks, and
``tag`` names its files in ``$STREAM_TEST_DIR`` (a gate a test opens, a marker a
generator's ``finally`` leaves), so that a test waits on files, never on time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import mlserve


def _file(kind: str, tag: int) -> Path:
    return Path(os.environ["STREAM_TEST_DIR"]) / f"{kind}-{tag}"


def _wait_for(path: Path) -> None:
    """Until a test creates ``path`` (30 s at most: a test that forgot ends)."""
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _args(request: Any) -> tuple[int, int]:
    count, tag = (int(v) for v in np.asarray(request["inputs"]).reshape(-1)[:2])
    return count, tag


def _chunk(i: int) -> dict[str, Any]:
    return {"token": np.array([i], dtype=np.int64)}


class Tokens(mlserve.V2ModelServer):
    """Yields ``count`` chunks; before the last it waits for the gate file of ``tag``."""

    def predict(self, request: Any) -> Iterator[dict[str, Any]]:
        count, tag = _args(request)
        for i in range(count):
            if i == count - 1 and tag:
                _wait_for(_file("gate", tag))
            yield _chunk(i)


class AsyncTokens(mlserve.V2ModelServer):
    """An async generator: ``count`` chunks."""

    async def predict(self, request: Any) -> AsyncIterator[dict[str, Any]]:
        count, _ = _args(request)
        for i in range(count):
            await asyncio.sleep(0)
            yield _chunk(i)


class Broken(mlserve.V2ModelServer):
    """Yields ``count`` chunks, then fails."""

    def predict(self, request: Any) -> Iterator[dict[str, Any]]:
        count, _ = _args(request)
        yield from (_chunk(i) for i in range(count))
        raise ValueError(f"broken after {count} chunks")


class Endless(mlserve.V2ModelServer):
    """Yields until it is closed; its ``finally`` leaves the ``closed`` file of ``tag``."""

    def predict(self, request: Any) -> Iterator[dict[str, Any]]:
        _, tag = _args(request)
        try:
            i = 0
            while True:
                yield _chunk(i)
                i += 1
                time.sleep(0.01)
        finally:
            _file("closed", tag).touch()


class AsyncEndless(mlserve.V2ModelServer):
    """``Endless`` as an async generator, pulled on the event loop."""

    async def predict(self, request: Any) -> AsyncIterator[dict[str, Any]]:
        _, tag = _args(request)
        try:
            i = 0
            while True:
                yield _chunk(i)
                i += 1
                await asyncio.sleep(0.01)
        finally:
            _file("closed", tag).touch()


class Plain(mlserve.V2ModelServer):
    """Not a stream: one answer."""

    def predict(self, request: Any) -> Any:
        count, _ = _args(request)
        return {"token": np.arange(count, dtype=np.int64)}


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("stream-tests")
    fn.add_model("tokens", class_name=Tokens)
    fn.add_model("async-tokens", class_name=AsyncTokens)
    fn.add_model("broken", class_name=Broken)
    fn.add_model("endless", class_name=Endless)
    fn.add_model("async-endless", class_name=AsyncEndless)
    fn.add_model("plain", class_name=Plain)
    return fn
