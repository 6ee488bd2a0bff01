"""The function tests/streaming/test_review.py serves: the corners of streaming a
reviewer tries first (an empty generator, one that fails before its first chunk)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import mlserve


class Empty(mlserve.V2ModelServer):
    """A generator that yields nothing: a stream of 0 chunks."""

    def predict(self, request: Any) -> Iterator[Any]:
        yield from ()


class EarlySync(mlserve.V2ModelServer):
    """Fails before its first chunk."""

    def predict(self, request: Any) -> Iterator[Any]:
        raise ValueError("no first chunk")
        yield  # a generator all the same


class EarlyAsync(mlserve.V2ModelServer):
    """An async generator that fails before its first chunk."""

    async def predict(self, request: Any) -> AsyncIterator[Any]:
        raise ValueError("no first chunk")
        yield  # an async generator all the same


class Plain(mlserve.V2ModelServer):
    """Answers once: its inputs, doubled."""

    def predict(self, request: Any) -> Any:
        return [2 * value for value in request["inputs"]]


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("stream-review")
    fn.add_model("empty", class_name=Empty)
    fn.add_model("early", class_name=EarlySync)
    fn.add_model("early-async", class_name=EarlyAsync)
    fn.add_model("plain", class_name=Plain)
    return fn
