"""The function the hidden-error and quiet-log tests serve:
``mlserve serve tests/server/hidden_fn.py``.

``broken``'s ``load()`` and ``leaky``'s ``predict()`` raise ``RuntimeError`` with a
secret: an absolute path and a key (``SECRET``); ``plain`` serves, and has no explain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlserve

KEY = "key=abc123"
PATH = str(Path(__file__).resolve().parent)  # an absolute path of this machine
SECRET = f"secret {PATH} {KEY}"


class Broken(mlserve.V2ModelServer):
    def load(self) -> None:
        raise RuntimeError(SECRET)

    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


class Leaky(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        raise RuntimeError(SECRET)


class Plain(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        return request["inputs"]


fn = mlserve.new_function("hidden")
fn.add_model("broken", class_name=Broken)
fn.add_model("leaky", class_name=Leaky)
fn.add_model("plain", class_name=Plain)
