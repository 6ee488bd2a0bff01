"""The models the explain tests serve, each saved in its version folder beside
what its explainer needs, and the references: shap called directly."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tests.frameworks.models import FEATURES, iris_like, version_dir

ROWS, _ = iris_like(9, rows=5)  # the rows explained
BACKGROUND, _ = iris_like(5, rows=20)


def save_sklearn(base: Path, name: str, estimator: Any, *, named: bool = False) -> Any:
    """Fit ``estimator`` on iris-like data (a regressor on a number made of it), as a
    DataFrame when ``named`` (so it has feature names), and save it with joblib."""
    import joblib
    import pandas as pd
    from sklearn.base import is_classifier

    x, y = iris_like(0, rows=90)
    target = y if is_classifier(estimator) else x @ np.array([1.0, -2.0, 0.5, 3.0])
    estimator.fit(pd.DataFrame(x, columns=FEATURES) if named else x, target)
    joblib.dump(estimator, version_dir(base, name, 1) / "model.joblib")
    return estimator


def save_xgboost(base: Path, name: str, estimator: Any, classes: int = 3) -> Any:
    """Fit an XGBoost estimator (``classes`` classes, or a regression target) and save
    it as JSON."""
    x, y = iris_like(2, rows=90)
    target = y % classes if type(estimator).__name__ == "XGBClassifier" else x[:, 0] + x[:, 2]
    estimator.fit(x, target)
    estimator.save_model(version_dir(base, name, 1) / "model.json")
    return estimator


def save_onnx_probabilities(base: Path, name: str) -> Any:
    """A scikit-learn classifier converted by skl2onnx (labels and a ZipMap of
    probabilities), with a background.csv (a header line of names) beside it."""
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    x, y = iris_like(4)
    estimator = LogisticRegression(max_iter=500).fit(x, y)
    onnx_model = to_onnx(estimator, x[:1].astype(np.float32), target_opset=17)
    folder = version_dir(base, name, 1)
    (folder / "model.onnx").write_bytes(onnx_model.SerializeToString())
    np.savetxt(folder / "background.csv", BACKGROUND, delimiter=",", header=",".join(FEATURES))
    return onnx_model


def onnx_probabilities(path: Path) -> Any:
    """The ONNX model's probabilities as a [rows, classes] function, called directly."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def predict(matrix: np.ndarray) -> np.ndarray:
        (probabilities,) = session.run(["output_probability"], {"X": matrix.astype(np.float32)})
        return np.asarray([[row[k] for k in sorted(row)] for row in probabilities], np.float64)

    return predict


def bracket_float(value: object) -> float:
    """``float`` that reads XGBoost 3's one-value ``base_score`` (``'[5E-1]'``)."""
    if isinstance(value, str) and value.startswith("[") and "," not in value:
        value = value.strip("[]")
    return builtins.float(value)  # type: ignore[arg-type]


@contextmanager
def shap_reading_xgboost_3() -> Iterator[Any]:
    """shap itself, its loader's ``float`` reading the bracket: the reference the
    explain answers are checked against (shap issue #4184, fixed after 0.48)."""
    import shap
    import shap.explainers._tree as tree

    tree.float = bracket_float  # type: ignore[attr-defined]
    try:
        yield shap
    finally:
        del tree.float  # type: ignore[attr-defined]
