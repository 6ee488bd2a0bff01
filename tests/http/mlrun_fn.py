"""mlrun's own serving test classes (tests/serving/test_serving.py), imports changed.

Served by tests/test_mlrun_compat.py both in-process and by a real
``python -m mlserve serve tests.http.mlrun_fn.py``.
"""

from __future__ import annotations

from typing import Any

import mlserve as mlrun
from mlserve import V2ModelServer


class ModelTestingClass(V2ModelServer):
    def load(self) -> None:
        pass

    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"][0] * self.get_param("multiplier")

    def explain(self, request: dict[str, Any]) -> Any:
        return {"explained": request["inputs"][0]}

    def op_myop(self, event: Any) -> Any:
        return event.body


class Echo(V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


def serving_function() -> mlrun.ServingFunction:
    fn = mlrun.new_function("tests", kind="serving")
    fn.set_topology("router")
    fn.add_model("m1", ".", class_name=ModelTestingClass, multiplier=100)
    fn.add_model("m2", ".", class_name=ModelTestingClass, multiplier=200)
    fn.add_model("m3:v1", ".", class_name=ModelTestingClass, multiplier=300)
    fn.add_model("m3:v2", ".", class_name=ModelTestingClass, multiplier=400)
    fn.add_model("echo", ".", class_name=Echo)
    return fn


class EnsembleModelTestingClass(ModelTestingClass):
    def predict(self, request: dict[str, Any]) -> Any:
        return {"predictions": [request["inputs"][0] * self.get_param("multiplier")]}
