"""The function the network tests serve: ``python -m mlserve serve tests/http/fn.py``."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import numpy as np

import mlserve

_gate = threading.Event()
_waiting = threading.Event()
_busy = threading.Event()


class Echo(mlserve.V2ModelServer):
    """Returns its inputs: each input tensor comes back as an output of the same name."""

    def predict(self, request: dict[str, Any]) -> Any:
        tensors = getattr(request, "tensors", None)
        return dict(tensors) if tensors is not None else request["inputs"]


class Scale(mlserve.V2ModelServer):
    """Declares one FP32 input [-1, 2]; outputs ``scaled`` and ``total``."""

    def load(self) -> None:
        self.inputs = [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}]
        self.outputs = [
            {"name": "scaled", "datatype": "FP32", "shape": [-1, 2]},
            {"name": "total", "datatype": "FP32", "shape": [-1]},
        ]

    def predict(self, request: dict[str, Any]) -> Any:
        x = np.asarray(request["inputs"], dtype=np.float32)
        return {"scaled": x * float(self.get_param("factor", 2)), "total": x.sum(axis=1)}


class Version(mlserve.V2ModelServer):
    """Answers with its own version, one INT64 per input row."""

    def predict(self, request: dict[str, Any]) -> Any:
        return np.full(len(request["inputs"]), int(self.version or 0), dtype=np.int64)


class Gate(mlserve.V2ModelServer):
    """A sync predict that blocks until ``release`` is called (or 30 s pass);
    ``waiting`` tells whether a predict has started."""

    def predict(self, request: dict[str, Any]) -> Any:
        _waiting.set()
        return [_gate.wait(30)]

    def op_waiting(self, event: Any) -> Any:
        return {"waiting": _waiting.is_set()}

    def op_release(self, event: Any) -> Any:
        _gate.set()
        return {"released": True}


class Sleepy(mlserve.V2ModelServer):
    """Sleeps ``inputs[0]`` seconds; ``/busy`` tells whether a predict is under way."""

    def predict(self, request: dict[str, Any]) -> Any:
        _busy.set()
        time.sleep(float(request["inputs"][0]))
        return ["slept"]

    def op_busy(self, event: Any) -> Any:
        return {"busy": _busy.is_set()}


class Where(mlserve.V2ModelServer):
    """Tells which process and thread ran it: ``/pid`` op and predict."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [threading.current_thread().name]

    def op_pid(self, event: Any) -> Any:
        return {"pid": os.getpid()}


class AsyncWhere(mlserve.V2ModelServer):
    """An async predict: awaited on the event loop's thread."""

    async def predict(self, request: dict[str, Any]) -> Any:
        await asyncio.sleep(0)
        return [threading.current_thread().name]


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("net-tests")
    fn.add_model("echo", class_name=Echo)
    fn.add_model("scale", class_name=Scale, factor=3)
    fn.add_model("version:1", class_name=Version)
    fn.add_model("version:2", class_name=Version)
    fn.add_model("gate", class_name=Gate)
    fn.add_model("sleepy", class_name=Sleepy)
    fn.add_model("where", class_name=Where)
    fn.add_model("async-where", class_name=AsyncWhere)
    return fn
