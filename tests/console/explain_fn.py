"""The function the console's explain test serves (tests/console/test_console_explain.py):
a scikit-learn forest on the iris measurements, trained into ``$MLSERVE_TEST_MODEL_DIR``
when that folder has no model yet, and the flowers example (its own ``explain``, no SHAP
values)."""

from __future__ import annotations

import os
from pathlib import Path

import mlserve
from examples.serving import HERE, FlowerClassifier


def train(folder: Path) -> None:
    """A small forest on the iris measurements, saved as ``folder/model.joblib``."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    features, labels = load_iris(return_X_y=True, as_frame=True)
    forest = RandomForestClassifier(n_estimators=10, max_depth=3, random_state=0)
    folder.mkdir(parents=True, exist_ok=True)
    joblib.dump(forest.fit(features, labels), folder / "model.joblib")


def serving_function() -> mlserve.ServingFunction:
    folder = Path(os.environ["MLSERVE_TEST_MODEL_DIR"])
    if not (folder / "model.joblib").is_file():
        train(folder)
    fn = mlserve.new_function("console-explain")
    fn.add_model(
        "iris", model_path=str(folder), class_name="mlserve.frameworks.sklearn.SKLearnModelServer"
    )
    fn.add_model(
        "flowers", model_path=str(HERE / "models" / "flowers"), class_name=FlowerClassifier
    )
    return fn
