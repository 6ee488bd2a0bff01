"""The function tests/streaming/test_http_streams.py serves: streaming models whose
progress the test reads from files in ``MLSERVE_STREAM_TEST_DIR``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import mlserve

KILOBYTE = "x" * 1000


def _dir() -> Path:
    return Path(os.environ["MLSERVE_STREAM_TEST_DIR"])


class Gated(mlserve.V2ModelServer):
    """Yields ``first``, waits until the file ``release`` exists, then yields
    ``inputs[0]`` more chunks, 20 ms apart; its ``finally`` writes ``finally``:
    "closed" when the stream was closed early, "ended" when it ran to its end."""

    def predict(self, request: Any) -> Iterator[Any]:
        outcome = "closed"
        try:
            yield {"step": "first"}
            while not (_dir() / "release").exists():
                time.sleep(0.02)
            for n in range(int(request["inputs"][0])):
                yield {"step": n}
                time.sleep(0.02)
            outcome = "ended"
        finally:
            (_dir() / "finally").write_text(outcome)


class AsyncGated(mlserve.V2ModelServer):
    """An async generator: yields ``first``, then awaits the file ``release``; its
    ``finally`` writes ``finally`` ("closed" or "ended") as Gated's does."""

    async def predict(self, request: Any) -> AsyncIterator[Any]:
        outcome = "closed"
        try:
            yield {"step": "first"}
            while not (_dir() / "release").exists():
                await asyncio.sleep(0.02)
            yield {"step": "second"}
            outcome = "ended"
        finally:
            (_dir() / "finally").write_text(outcome)


class Many(mlserve.V2ModelServer):
    """Yields ``inputs[0]`` chunks of 1 KB; writes how many it produced into ``produced``."""

    def predict(self, request: Any) -> Iterator[Any]:
        total = int(request["inputs"][0])
        produced = _dir() / "produced"
        for n in range(total):
            if n % 64 == 0:
                produced.write_text(str(n))
            yield {"n": n, "pad": KILOBYTE}
        produced.write_text(str(total))


class Failing(mlserve.V2ModelServer):
    """Yields two chunks, then fails."""

    def predict(self, request: Any) -> Iterator[Any]:
        yield {"n": 0}
        yield {"n": 1}
        raise ValueError("the secret cause at chunk 2")


class Words(mlserve.V2ModelServer):
    """Streams ``text_input`` word by word, upper-cased (``parameters.lower``: lower)."""

    def predict(self, request: Any) -> Iterator[Any]:
        text = request.tensors["text_input"][0]
        text = text.decode() if isinstance(text, bytes) else str(text)
        lower = (request.get("parameters") or {}).get("lower")
        for word in text.split():
            yield {"text_output": word.lower() if lower else word.upper()}


class Upper(mlserve.V2ModelServer):
    """Answers once: ``text_output`` upper-cased and ``length``."""

    def load(self) -> None:
        self.inputs = [{"name": "text_input", "datatype": "BYTES", "shape": [1]}]

    def predict(self, request: Any) -> Any:
        text = request.tensors["text_input"][0]
        text = text.decode() if isinstance(text, bytes) else str(text)
        return {"text_output": [text.upper()], "length": [len(text)]}


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("stream-http-tests")
    fn.add_model("gated", class_name=Gated)
    fn.add_model("async-gated", class_name=AsyncGated)
    fn.add_model("many", class_name=Many)
    fn.add_model("failing", class_name=Failing)
    fn.add_model("words", class_name=Words)
    fn.add_model("upper:1", class_name=Upper)
    return fn
