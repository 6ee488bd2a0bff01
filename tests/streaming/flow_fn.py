"""The function tests/streaming/test_flow_streams.py serves over HTTP: a flow whose
streaming step waits, after its first chunk, for the file ``release`` in
``MLSERVE_FLOW_TEST_DIR``, and writes ``finally`` there when its generator closes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlserve


def gated(body: Any) -> Iterator[str]:
    folder = Path(os.environ["MLSERVE_FLOW_TEST_DIR"])
    try:
        yield "first"
        while not (folder / "release").exists():
            time.sleep(0.02)
        yield "second"
    finally:
        (folder / "finally").write_text("closed")


def shout(word: str) -> str:
    return word.upper()


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("flow-stream-tests")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="gated", handler="gated").to(name="shout", handler="shout").respond()
    fn.set_streaming()
    return fn
