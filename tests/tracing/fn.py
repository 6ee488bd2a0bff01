"""The functions the end-to-end trace tests serve (``mlserve serve tests/tracing/fn.py``);
``TRACE_FN`` picks one:

- ``router`` (default): a router of ``hooks`` (pre/post-processing around predict) and
  ``batched`` (adaptive batching, a 50 ms window so concurrent requests share a batch);
- ``flow``: a flow whose ``$remote`` step posts to ``REMOTE_URL`` (a second served function);
- ``split``: a flow whose Kafka queue (``QUEUE_URL``) hands the event to the child function
  ``f2`` (run by ``tests/tracing/queue_child.py`` in a process of its own).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import mlserve


class Hooks(mlserve.V2ModelServer):
    """Doubles its inputs, with a preprocess and a postprocess to trace."""

    def preprocess(self, request: Any, operation: str = "infer") -> Any:
        return request

    def predict(self, request: dict[str, Any]) -> Any:
        return [2 * x for x in request["inputs"]]

    def postprocess(self, response: dict[str, Any]) -> dict[str, Any]:
        return response


class Batched(mlserve.V2ModelServer):
    """Doubles an FP32 tensor; concurrent requests are merged into one predict."""

    max_batch_size = 8

    def predict(self, request: dict[str, Any]) -> Any:
        return {"y": np.asarray(request["inputs"]) * 2}


def plus_one(x: int) -> int:
    return x + 1


def keep(body: Any) -> Any:
    return body


def router() -> mlserve.ServingFunction:
    fn = mlserve.new_function("traced", kind="serving")
    fn.add_model("hooks", class_name=Hooks)
    fn.add_model("batched", class_name=Batched, max_batch_time=0.05)
    return fn


def flow() -> mlserve.ServingFunction:
    fn = mlserve.new_function("front", kind="serving")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="prep", handler="tests.tracing.fn.keep").to(
        "$remote", name="score", url=os.environ["REMOTE_URL"], method="POST"
    ).respond()
    return fn


def split() -> mlserve.ServingFunction:
    fn = mlserve.new_function("root", kind="serving")
    fn.add_child_function("f2")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="prep", handler="tests.tracing.fn.plus_one").to(
        ">>", name="q", path=os.environ.get("QUEUE_URL")
    )
    graph.add_step(name="score", handler="tests.tracing.fn.plus_one", after="q", function="f2")
    return fn


fn = {"router": router, "flow": flow, "split": split}[os.environ.get("TRACE_FN", "router")]()
