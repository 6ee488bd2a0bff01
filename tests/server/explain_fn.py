"""The function the explain network tests serve: ``mlserve serve tests/server/explain_fn.py``.

``slow`` predicts at once and explains in ``EXPLAIN_SECONDS`` (1 by default), one
explanation at a time with two waiting (docs/explain.md#limits); versions 1 and 2 of
``rows`` answer a SHAP-shaped explanation of their rows at once.
"""

from __future__ import annotations

import os
import time
from typing import Any

import mlserve

SECONDS = float(os.environ.get("EXPLAIN_SECONDS", "1"))


class Slow(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        return [sum(row) for row in request["inputs"]]

    def explain(self, request: dict[str, Any]) -> Any:
        time.sleep(SECONDS)
        return {"explained": len(request["inputs"])}


class Rows(mlserve.V2ModelServer):
    """Each feature's value, signed by the class, is its SHAP value: the row form of
    docs/explain.md#the-answer."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [0 for _ in request["inputs"]]

    def explain(self, request: dict[str, Any]) -> Any:
        rows = request["inputs"]
        return {
            "shap_values": {"no": [[-v for v in row] for row in rows], "yes": rows},
            "base_values": [0.5, int(self.version) / 10],
            "feature_names": ["a", "b"],
            "explainer": "tree",
        }


fn = mlserve.new_function("explain-net")
fn.add_model("slow", class_name=Slow, explain_concurrency=1, explain_queue=2)
fn.add_model("rows:1", class_name=Rows)
fn.add_model("rows:2", class_name=Rows)
