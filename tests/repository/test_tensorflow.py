"""A TensorFlow SavedModel repository, served by a minimal SavedModel class.

``mlserve.frameworks.tensorflow.TFModelServer`` is what the repository picks
for a SavedModel by default (by name); here a small class of the test's own
loads and calls the signature, proving the repository's TF path.
"""

from __future__ import annotations

import threading
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


def test_tf_model_hot_reloads_under_v1_load_with_batching_from_yaml(
    tmp_path: Path, serve_repo: Any
) -> None:
    base = tmp_path / "models"
    save_version(base / "half_plus_two", 1, bias=2.0)
    config = [
        {
            "name": "half_plus_two",
            "class_name": None,
            "model_platform": "tensorflow",
            "max_batch_size": 8,
            "max_batch_time": 0.002,
        }
    ]
    server = serve_repo(base, config)
    answers: list[float] = []
    failures: list[Any] = []
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            body = {"instances": [1.0]}
            response = server.test("/v1/models/half_plus_two:predict", body=body, silent=True)
            if isinstance(response, dict):
                answers.append(response["predictions"][0])
            else:
                failures.append(response.body)

    threads = [threading.Thread(target=send, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(answers) > 20, timeout=30)
        save_version(base / "half_plus_two", 2, bias=3.0)
        wait_until(lambda: 3.5 in answers[-10:], timeout=30)
        switched = len(answers)
        wait_until(lambda: len(answers) > switched + 20, timeout=30)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert set(answers) == {2.5, 3.5}
    model = server.graph.object.routes["half_plus_two:2"].object
    assert type(model).__name__ == "TFModelServer" and model.batcher.max_batch_size == 8
