"""Toy models for the tests, in one place.

They are real ``V2ModelServer`` subclasses, small enough to reason about: each
answer is a pure function of the request and the model's parameters.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np

import mlserve
from mlserve import V2ModelServer


class Multiplier(V2ModelServer):
    """``outputs = [x * multiplier for x in inputs]``; the multiplier is a parameter."""

    def load(self) -> None:
        self.model = self.get_param("multiplier", 1)

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [x * self.model for x in request["inputs"]]

    def explain(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"multiplier": self.model, "count": len(request["inputs"])}

    def op_double(self, event: Any) -> dict[str, Any]:
        return {"doubled": [x * 2 for x in event.body["inputs"]]}

    def op_info(self, event: Any) -> list[Any]:
        return ["info", self.name, self.version, event.method]

    def op_echo(self, event: Any) -> Any:
        return event.body

    def op_event(self, event: Any) -> dict[str, Any]:
        """What the model sees of the event a face built."""
        return {
            "body": event.body,
            "path": event.path,
            "method": event.method,
            "id": event.id,
            "content_type": event.content_type,
            "trigger": event.trigger.kind,
            "headers": {k.lower(): v for k, v in event.headers.items()},
        }


class AsyncMultiplier(Multiplier):
    """The same model with a coroutine ``predict``."""

    async def predict(self, request: dict[str, Any]) -> list[Any]:  # type: ignore[override]
        await asyncio.sleep(0)
        return [x * self.model for x in request["inputs"]]


class Recorder(V2ModelServer):
    """Records the order its hooks ran in, and what each one saw."""

    def load(self) -> None:
        self.calls: list[str] = []
        self.model = "recorder"

    def preprocess(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        self.calls.append(f"preprocess:{operation}")
        request["inputs"] = [x + 1 for x in request["inputs"]]
        return request

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        self.calls.append(f"validate:{operation}")
        return super().validate(request, operation)

    def predict(self, request: dict[str, Any]) -> list[Any]:
        self.calls.append("predict")
        return [x * 10 for x in request["inputs"]]

    def explain(self, request: dict[str, Any]) -> str:
        self.calls.append("explain")
        return "because"

    def postprocess(self, response: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("postprocess")
        response["post"] = True
        return response


class FailingLoad(V2ModelServer):
    """``load()`` raises: the model stays not ready, with the error recorded."""

    def load(self) -> None:
        raise OSError("disk on fire")

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return ["never"]


class GatedLoad(Multiplier):
    """``load()`` waits for the gate named by its ``gate`` parameter to open."""

    gates: dict[str, threading.Event] = {}

    @classmethod
    def gate(cls, name: str) -> threading.Event:
        return cls.gates.setdefault(name, threading.Event())

    def load(self) -> None:
        if not self.gate(self.get_param("gate")).wait(30):
            raise TimeoutError("the test never opened the gate")
        super().load()


class Raising(V2ModelServer):
    """The model's own code raises: a 500."""

    def predict(self, request: dict[str, Any]) -> Any:
        raise ValueError("model code broke")


class Rejecting(Multiplier):
    """``validate`` raises a plain exception: a 400."""

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        if any(x < 0 for x in request["inputs"]):
            raise ValueError("negative inputs are not allowed")
        return request


class TensorEcho(V2ModelServer):
    """Returns its inputs unchanged, and remembers what ``predict`` saw."""

    seen: list[Any] = []

    def load(self) -> None:
        self.model = "echo"

    def predict(self, request: dict[str, Any]) -> Any:
        TensorEcho.seen.append(request)
        return request["inputs"]


class TensorSum(V2ModelServer):
    """Several outputs from one tensor: ``{"sum", "double", "label"}``."""

    def load(self) -> None:
        self.model = "sum"

    def predict(self, request: dict[str, Any]) -> dict[str, Any]:
        x = request["inputs"]
        if isinstance(x, dict):
            x = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in x.values()])
        return {
            "sum": np.asarray([np.sum(x)], dtype=np.float64),
            "double": np.asarray(x) * 2,
            "label": np.asarray(["big" if np.sum(x) > 10 else "small"], dtype=object),
        }


class Declared(V2ModelServer):
    """Declares two inputs; the request is checked against them."""

    def load(self) -> None:
        self.model = "declared"
        self.inputs = [
            {"name": "features", "datatype": "FP32", "shape": [-1, 3]},
            {"name": "mask", "datatype": "BOOL", "shape": [-1]},
        ]
        self.outputs = [{"name": "score", "datatype": "FP32", "shape": [-1]}]

    def predict(self, request: dict[str, Any]) -> Any:
        inputs = request["inputs"]
        return (inputs["features"].sum(axis=1) * inputs["mask"]).astype(np.float32)


class DeclaredOne(V2ModelServer):
    """Declares one input and one output: the output tensor takes that name."""

    def load(self) -> None:
        self.model = "declared-one"
        self.inputs = [{"name": "x", "datatype": "INT64", "shape": [-1, 2]}]
        self.outputs = [{"name": "y", "datatype": "INT64", "shape": [-1]}]

    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"].sum(axis=1)


class NumpyRows(V2ModelServer):
    """Rows form, numpy answers of every kind: never a 500."""

    def load(self) -> None:
        self.model = "numpy"

    def predict(self, request: dict[str, Any]) -> Any:
        kind = request["inputs"][0]
        values: dict[str, Any] = {
            "array": np.arange(3, dtype=np.int32),
            "float32": np.float32(1.5),
            "int64": np.int64(7),
            "bool": np.bool_(True),
            "matrix": np.ones((2, 2), dtype=np.float16),
            "nested": {"a": np.array([1.0, 2.0]), "b": [np.uint8(3)]},
            "strings": np.array(["a", "b"]),
        }
        return values[kind]


class MetricModel(Multiplier):
    """Sets a metric on each prediction and chooses what is logged."""

    def predict(self, request: dict[str, Any]) -> list[Any]:
        self.set_metric("batch", len(request["inputs"]))
        self.set_metric("first", request["inputs"][0])
        return super().predict(request)

    def logged_results(self, request: dict[str, Any], response: dict[str, Any], op: str) -> Any:
        if self.get_param("log_real", False):
            return None, None
        return [["logged-in"]], [["logged-out"]]


class ParamReader(V2ModelServer):
    """Answers with the parameters it was asked for."""

    def load(self) -> None:
        self.model = "params"

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [self.get_param(key, "default") for key in request["inputs"]]


class LoadFlag(V2ModelServer):
    """Counts its loads (a class attribute, since instances come and go)."""

    loads = 0

    def load(self) -> None:
        LoadFlag.loads += 1
        self.model = "loaded"

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [self.model]


class ImageSize(V2ModelServer):
    """Sees an image body as ``inputs: [bytes]``; answers with its length and type."""

    def predict(self, request: dict[str, Any]) -> list[Any]:
        data = request["inputs"][0]
        return [type(data).__name__, len(data)]


class RecordingLogger:
    """A model_logger stand-in that only records what the model hands it."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []

    def push(
        self,
        model: Any,
        start: Any,
        request: Any,
        response: Any,
        op: str,
        microsec: int,
        metrics: dict[str, Any],
    ) -> None:
        self.records.append(
            {
                "model": model.name,
                "start": start,
                "request": request,
                "response": response,
                "op": op,
                "microsec": microsec,
                "metrics": metrics,
            }
        )

    def push_error(self, model: Any, start: Any, request: Any, op: str, exc: BaseException) -> None:
        self.errors.append({"model": model.name, "request": request, "op": op, "error": exc})


def model_of(server: mlserve.GraphServer, key: str) -> Any:
    """The live model object serving route ``key``."""
    return server.graph.routes[key].object  # type: ignore[union-attr]


def serve(models: dict[str, Any], **kwargs: Any) -> mlserve.GraphServer:
    """A mock server of a function with ``{key: class or (class, class_args)}`` models."""
    fn = mlserve.new_function("tests")
    for key, spec in models.items():
        cls, args = spec if isinstance(spec, tuple) else (spec, {})
        fn.add_model(key, class_name=cls, **args)
    for name, value in kwargs.pop("spec", {}).items():
        setattr(fn.spec, name, value)
    return fn.to_mock_server(**kwargs)


class BlockingPredict(V2ModelServer):
    """A plain ``predict`` that blocks until its gate opens."""

    gate = threading.Event()

    def predict(self, request: dict[str, Any]) -> list[Any]:
        if not BlockingPredict.gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        return ["unblocked"]
