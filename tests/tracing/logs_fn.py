"""The function the log tests serve: a model that logs while it predicts, one that fails."""

from __future__ import annotations

import logging
from typing import Any

import mlserve

logger = logging.getLogger("tests.loud")


class Loud(mlserve.V2ModelServer):
    """Logs one line per call, then echoes its inputs."""

    def predict(self, request: dict[str, Any]) -> Any:
        logger.warning("predicting %d rows", len(request["inputs"]))
        return request["inputs"]


class Broken(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        raise RuntimeError("the model broke")


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("logs")
    fn.add_model("loud", class_name=Loud)
    fn.add_model("broken", class_name=Broken)
    return fn
