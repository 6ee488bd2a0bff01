"""mlserve's echo model: ``python -m mlserve serve benchmarks/servers/mlserve_model.py``."""

from __future__ import annotations

from typing import Any

import mlserve


class Echo(mlserve.V2ModelServer):
    """Returns its input: a [1, 4] FP32 tensor comes back as the output tensor."""

    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("bench")
    fn.add_model("echo", class_name=Echo, model_path=".")
    return fn
