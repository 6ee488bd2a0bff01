"""A function's code file, as a user writes it: models plus ``serving_function()``.

Used by code_to_function (its classes become the namespace of class names) and
by ``mlserve serve tests/testdata/serving_code.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import mlserve


class Scaler(mlserve.V2ModelServer):
    """Multiplies rows by its ``scale`` parameter."""

    def load(self) -> None:
        self.model = self.get_param("scale", 1)

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [x * self.model for x in request["inputs"]]

    def explain(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"scale": self.model, "greeting": self.get_param("greeting")}

    def op_describe(self, event: Any) -> dict[str, Any]:
        return {"model": self.name, "version": self.version, "scale": self.model}


class Doubler(mlserve.V2ModelServer):
    """Doubles a tensor; declares its output."""

    def load(self) -> None:
        self.model = 2
        self.outputs = [{"name": "doubled", "datatype": "FP64", "shape": [-1]}]

    def predict(self, request: dict[str, Any]) -> Any:
        return np.asarray(request["inputs"], dtype=np.float64) * self.model


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.code_to_function("code-fn", filename=__file__, project="tests", tag="v1")
    fn.add_model("scaler", class_name="Scaler", scale=10)
    fn.add_model("scaler:2", class_name="Scaler", scale=20)
    fn.add_model("doubler", class_name="Doubler")
    fn.spec.parameters = {"greeting": "hello"}
    return fn
