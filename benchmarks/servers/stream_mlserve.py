"""mlserve's streaming models for benchmarks/streaming.py: ``tokens`` (an async generator,
pulled on the loop as MLServer pulls its own) and ``tokens_sync`` (a plain generator, run
on a producer thread)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np

import mlserve


class Tokens(mlserve.V2ModelServer):
    """Yields as many one-word chunks as the INT32 input says (a BYTES [1] tensor each)."""

    async def predict(self, request: dict[str, Any]) -> AsyncIterator[Any]:
        for _ in range(int(request["inputs"].ravel()[0])):
            yield np.array(["token"], dtype=object)


class SyncTokens(mlserve.V2ModelServer):
    """The same chunks from a sync generator."""

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        for _ in range(int(request["inputs"].ravel()[0])):
            yield np.array(["token"], dtype=object)


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("bench-streams")
    fn.add_model("tokens", class_name=Tokens, model_path=".")
    fn.add_model("tokens_sync", class_name=SyncTokens, model_path=".")
    return fn
