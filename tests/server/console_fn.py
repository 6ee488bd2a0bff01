"""The function the console tests serve: ``mlserve serve tests/server/console_fn.py``.

Models of several kinds: declared FP32 inputs (``scale``), none declared (``echo``), two
versions (``version:1``, ``version:2``), batched (``batched``), BYTES and INT64 inputs
(``words``), a load that fails (``broken``) and a name made to break a page
(``HOSTILE``). ``CONSOLE_STREAM`` set: tracking on, to that file.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import mlserve
from tests.http.fn import Echo, Scale, Version

HOSTILE = "<img src=x onerror=alert(1)>"


class Batched(Scale):
    """Scale, batched (up to 4 rows a call)."""

    max_batch_size = 4


class Words(mlserve.V2ModelServer):
    """Declares a BYTES and an INT64 input; answers the length of each word plus the number."""

    def load(self) -> None:
        self.inputs = [
            {"name": "word", "datatype": "BYTES", "shape": [-1]},
            {"name": "count", "datatype": "INT64", "shape": [-1, 1]},
        ]
        self.outputs = [{"name": "length", "datatype": "INT64", "shape": [-1]}]

    def predict(self, request: dict[str, Any]) -> Any:
        tensors = request.tensors
        words, counts = np.asarray(tensors["word"]), np.asarray(tensors["count"])
        lengths = [len(str(w)) + int(c.sum()) for w, c in zip(words, counts, strict=True)]
        return np.asarray(lengths, dtype=np.int64)


class Broken(mlserve.V2ModelServer):
    def load(self) -> None:
        raise RuntimeError("weights are corrupt at /secret/path")

    def predict(self, request: dict[str, Any]) -> Any:
        return []


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("console-tests", project="console-project")
    fn.add_model("scale", class_name=Scale, factor=3, api_token="hunter2")
    fn.add_model("echo", class_name=Echo)
    fn.add_model("version:1", class_name=Version)
    fn.add_model("version:2", class_name=Version)
    fn.add_model("batched", class_name=Batched)
    fn.add_model("words", class_name=Words)
    fn.add_model("broken", class_name=Broken)
    fn.add_model(HOSTILE, class_name=Echo)
    stream = os.environ.get("CONSOLE_STREAM")
    if stream:
        fn.set_tracking(stream_path=stream)
    return fn


fn = serving_function()
