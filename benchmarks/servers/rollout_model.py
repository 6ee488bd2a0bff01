"""The rollout benchmark's function: ``ROLLOUT_CASE=plain|weighted|shadow python -m mlserve
serve benchmarks/servers/rollout_model.py``.

``plain``: one echo route; ``weighted``: two weighted versions of the same name (90/10);
``shadow``: the plain route and a shadow of it (an echo too, so the comparison agrees).
"""

from __future__ import annotations

import os
from typing import Any

import mlserve


class Echo(mlserve.V2ModelServer):
    """Returns its input: a [1, 4] FP32 tensor comes back as the output tensor."""

    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


def serving_function() -> mlserve.ServingFunction:
    case = os.environ.get("ROLLOUT_CASE", "plain")
    fn = mlserve.new_function("bench-rollout")
    if case == "weighted":
        fn.add_model("echo:v1", class_name=Echo, model_path=".", weight=90)
        fn.add_model("echo:v2", class_name=Echo, model_path=".", weight=10)
    else:
        fn.add_model("echo", class_name=Echo, model_path=".")
    if case == "shadow":
        fn.add_model("echo-next", class_name=Echo, model_path=".", shadow="echo")
    return fn
