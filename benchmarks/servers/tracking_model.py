"""The model of ``python -m benchmarks.tracking``: sums the rows it gets (mlrun's row form).

``tracked_function(stream)`` is the same function with tracking on (``stream``: a
file path or a ``kafka://`` URL) or off (``""``); the HTTP runs serve it from a
two-line file (``fn = tracked_function(...)``), the in-process runs call its mock server.
``BODY`` is the request every run sends (``benchmarks.instructions`` too), ``ANSWER`` its
outputs.
"""

from __future__ import annotations

import json
from typing import Any

import mlserve

BODY = json.dumps({"inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]}).encode()
ANSWER = [10, 26]


class Sum(mlserve.V2ModelServer):
    """One number per row: the row's sum."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [sum(row) for row in request["inputs"]]


def tracked_function(stream: str) -> mlserve.ServingFunction:
    fn = mlserve.new_function("bench", project="bench")
    fn.add_model("m", class_name=Sum, model_path=".")
    fn.spec.parameters["endpoint_store_url"] = "memory://"  # endpoint records: no database
    if stream:
        fn.set_tracking(stream_path=stream)
    return fn
