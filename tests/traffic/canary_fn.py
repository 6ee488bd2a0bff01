"""The function the served rollout test runs: ``m:v1`` and ``m:v2`` share ``m`` 50/50,
and ``m:v2``, under a rollback policy, fails every call while the file named by
``CANARY_FAIL_FILE`` exists (the test creates it)."""

from __future__ import annotations

import os
from typing import Any

import mlserve
from tests.traffic.rollout_fn import Variant


class Canary(Variant):
    def predict(self, request: dict[str, Any]) -> Any:
        if os.path.exists(os.environ.get("CANARY_FAIL_FILE", "")):
            raise RuntimeError("the canary broke")
        return super().predict(request)


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("canary")
    fn.add_model("m:v1", class_name=Variant, answer=1, weight=50)
    fn.add_model("m:v2", class_name=Canary, answer=2, weight=50, policy={"min_requests": 10})
    fn.add_model("pid", class_name=Variant)
    return fn
