"""Build the example TensorFlow model repository: ``examples/tf_repository/``.

    python examples/make_tf_repository.py
    mlserve serve examples/tf_repository
    curl -s 127.0.0.1:8080/v2/models/half_plus_two/infer \\
        -d '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2, 5]}]}'

``half_plus_two`` is TF Serving's own tutorial model: ``y = 0.5 * x + b``,
version 1 with ``b = 2`` and version 2 with ``b = 3`` (so a client sees which
version answered). Each version is a ``tf.Module`` SavedModel with the
``serving_default`` signature, written into a hidden folder and renamed into
place, the way a new version should reach a served repository.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = {1: 2.0, 2: 3.0}


def save_version(base: Path, version: int, bias: float) -> Path:
    """Save one version of ``half_plus_two`` under ``base`` (atomically, by rename)."""
    import tensorflow as tf

    class HalfPlus(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = tf.Variable(0.5, dtype=tf.float32)
            self.b = tf.Variable(bias, dtype=tf.float32)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": self.a * x + self.b}

    module = HalfPlus()
    staging = base / f".{version}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    tf.saved_model.save(module, str(staging), signatures={"serving_default": module.serve})
    target = base / str(version)
    shutil.rmtree(target, ignore_errors=True)
    os.rename(staging, target)
    return target


def main(root: Path = HERE / "tf_repository") -> None:
    for version, bias in VERSIONS.items():
        print("wrote", save_version(root / "half_plus_two", version, bias))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "tf_repository")
