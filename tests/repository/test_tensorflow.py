"""A TensorFlow SavedModel repository, served by a minimal SavedModel class.

``mlserve.frameworks.tensorflow.TFModelServer`` is what the repository picks
for a SavedModel by default (by name); here a small class of the test's own
loads and calls the signature, proving the repository's TF path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from examples.make_tf_repository import save_version
from mlserve import V2ModelServer
from mlserve.repository.layout import detect_class
from tests.repository.fixtures import wait_until

CLASS = "tests.repository.test_tensorflow.SavedModelServer"


class SavedModelServer(V2ModelServer):
    def load(self) -> None:
        import tensorflow as tf

        self.model = tf.saved_model.load(self.model_path).signatures["serving_default"]

    def predict(self, request: dict[str, Any]) -> list[float]:
        import tensorflow as tf

        x = tf.constant(np.asarray(request["inputs"], dtype=np.float32))
        return self.model(x=x)["y"].numpy().tolist()  # type: ignore[no-any-return]


def test_savedmodel_versions_serve_and_hot_reload(tmp_path: Path, serve_repo: Any) -> None:
    base = tmp_path / "models"
    save_version(base / "half_plus_two", 1, bias=2.0)
    save_version(base / "half_plus_two", 2, bias=3.0)
    assert (
        detect_class(base / "half_plus_two" / "2") == "mlserve.frameworks.tensorflow.TFModelServer"
    )
    server = serve_repo(
        base,
        [
            {
                "name": "half_plus_two",
                "class_name": CLASS,
                "version_policy": "all",
                "labels": {"stable": 1, "canary": 2},
            }
        ],
    )
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2, 5]}]}

    def outputs(path: str) -> tuple[str, list[float]]:
        answer = server.test(path, body=body)
        return answer["model_version"], answer["outputs"][0]["data"]

    assert outputs("/v2/models/half_plus_two/infer") == ("2", [3.5, 4.0, 5.5])
    stable = server.repository.resolve_label("half_plus_two", "stable")
    assert outputs(f"/v2/models/half_plus_two/versions/{stable}/infer") == ("1", [2.5, 3.0, 4.5])
    save_version(base / "half_plus_two", 3, bias=4.0)
    wait_until(
        lambda: outputs("/v2/models/half_plus_two/infer") == ("3", [4.5, 5.0, 6.5]), timeout=30
    )
