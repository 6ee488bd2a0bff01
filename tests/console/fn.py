"""The function the console's browser tests serve (tests/console/test_console_browser.py):
the example flowers classifier in two versions, an image model, a model whose load
fails with a secret in its reason, and one whose name is HTML."""

from __future__ import annotations

from typing import Any

import mlserve
from examples.serving import HERE, FlowerClassifier
from tests.http.image_fn import Pixels

# The most hostile name a model may have: no "/" nor ":" (a URL path part and the
# route key's separator); a browser that treated it as HTML would run its handler.
HOSTILE = "<img src=x onerror=alert(1)>"
SECRET = "password=hunter2 at /srv/secret/path"


class Broken(mlserve.V2ModelServer):
    """Its load fails: the console shows the reason, unless errors are hidden."""

    def load(self) -> None:
        raise RuntimeError(SECRET)

    def predict(self, request: dict[str, Any]) -> Any:
        raise AssertionError("never loaded")


class Words(mlserve.V2ModelServer):
    """One BYTES input; answers each string's length (its records hold the strings)."""

    def load(self) -> None:
        self.inputs = [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
        self.outputs = [{"name": "length", "datatype": "INT64", "shape": [-1]}]

    def predict(self, request: Any) -> Any:
        return [len(str(text)) for text in request["inputs"]]


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("console-tests")
    flowers = str(HERE / "models" / "flowers")
    fn.add_model("flowers", model_path=flowers, class_name=FlowerClassifier)
    fn.add_model("flowers:v2", model_path=flowers, class_name=FlowerClassifier)
    fn.add_model("pixels", class_name=Pixels)
    fn.add_model("broken", class_name=Broken)
    fn.add_model(HOSTILE, class_name=Words)
    return fn
