"""The function the rollout tests serve: ``python -m mlserve serve tests/traffic/rollout_fn.py``.

``m`` is split 90/10 between ``m:v1`` and ``m:v2`` (sticky by ``parameters.user``, a
variant may be forced); ``m:slow`` shadows it, sleeping ``SHADOW_SLEEP`` seconds a
call, and ``m-bad`` shadows it, failing every call. ``ROLLOUT_STREAM`` names a file
for the model-log stream.
"""

from __future__ import annotations

import os
import time
from typing import Any

import mlserve

SHADOW_SLEEP = float(os.environ.get("ROLLOUT_SHADOW_SLEEP", "5"))


class Variant(mlserve.V2ModelServer):
    """``outputs = [x * answer]``; ``/pid`` tells which worker answered."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [x * self.get_param("answer", 1) for x in request["inputs"]]

    def op_pid(self, event: Any) -> Any:
        return {"pid": os.getpid()}


class SlowShadow(Variant):
    def predict(self, request: dict[str, Any]) -> Any:
        time.sleep(SHADOW_SLEEP)
        return super().predict(request)


class FailingShadow(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        raise RuntimeError("the shadow broke")


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("rollout")
    fn.set_topology("router", route_key="parameters.user", allow_forced_route=True)
    fn.add_model("m:v1", class_name=Variant, answer=1, weight=90)
    fn.add_model("m:v2", class_name=Variant, answer=2, weight=10)
    fn.add_model("m:slow", class_name=SlowShadow, answer=1, shadow=True)
    fn.add_model("m-bad", class_name=FailingShadow, shadow="m")
    fn.add_model("pid", class_name=Variant)
    stream = os.environ.get("ROLLOUT_STREAM")
    if stream:  # the model-log stream, a file
        fn.set_tracking(stream)
    return fn
