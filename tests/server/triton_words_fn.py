"""The function tests/server/test_triton_words.py serves: a versioned model with one
declared input (``scale`` version 1) and one with two and properties (``pair``)."""

from __future__ import annotations

from typing import Any

import numpy as np

import mlserve
from mlserve.protocol.errors import InvalidInput


class Scale(mlserve.V2ModelServer):
    """Declares one FP32 input ``x`` [-1, 2]; doubles it."""

    def load(self) -> None:
        self.inputs = [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}]
        self.outputs = [{"name": "y", "datatype": "FP32", "shape": [-1, 2]}]

    def predict(self, request: dict[str, Any]) -> Any:
        try:
            rows = np.asarray(request["inputs"], dtype=np.float32)
        except (TypeError, ValueError) as exc:  # rows of objects (records are the model's)
            raise InvalidInput(f"input 'x' takes numbers: {exc}") from None
        return {"y": rows * 2}


class Pair(mlserve.V2ModelServer):
    """Declares two FP32 inputs ``a`` and ``b`` [-1]; adds them."""

    def load(self) -> None:
        self.inputs = [
            {"name": "a", "datatype": "FP32", "shape": [-1]},
            {"name": "b", "datatype": "FP32", "shape": [-1]},
        ]
        self.outputs = [{"name": "sum", "datatype": "FP32", "shape": [-1]}]

    def predict(self, request: dict[str, Any]) -> Any:
        return {"sum": request["inputs"]["a"] + request["inputs"]["b"]}

    def get_metadata(self) -> dict[str, Any]:
        return {**super().get_metadata(), "properties": {"adds": "a+b"}}


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("triton-words")
    fn.add_model("scale:1", class_name=Scale)
    fn.add_model("pair", class_name=Pair)
    return fn
