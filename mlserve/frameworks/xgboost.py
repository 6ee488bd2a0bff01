"""``XGBoostModelServer``: a native XGBoost model served as a ``V2ModelServer``
(docs/frameworks.md#xgboost).

The model is ``model.json`` or ``model.ubj`` (``Booster.save_model`` or
``XGBClassifier/XGBRegressor.save_model``: XGBoost's own formats, no pickle),
loaded as a ``Booster`` and run with ``inplace_predict`` (thread safe, no
DMatrix copy), so the extra needs no scikit-learn.

Outputs, as MLServer's XGBoost runtime gives them: ``predict`` (the default)
is the booster's output, except for a model saved by ``XGBClassifier``, whose
``predict`` is the class and which also has ``predict_proba`` (probability
per class, as ``XGBClassifier.predict_proba``). Metadata: one
``[-1, num_features]`` input, and in ``parameters`` the objective, the
feature names and types when the model has them, and the classes.
Warm-up requests beside the model file run before it is ready
(mlserve.frameworks.warmup).

Explain answers SHAP values (mlserve.frameworks.explainers,
docs/frameworks.md#explanations) from shap's tree explainer: the margin
(log-odds for a classifier, one per class for several), as shap explains an
XGBoost model.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from mlserve.frameworks.common import (
    check_request,
    feature_matrix,
    model_file,
    requested_outputs,
    require,
    rows_answer,
)
from mlserve.frameworks.explainers import configured_explainer
from mlserve.frameworks.warmup import run_warmup
from mlserve.model import V2ModelServer
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.forms import InferenceRequest

__all__ = ["MODEL_FILES", "XGBoostModelServer", "is_xgboost_json"]

MODEL_FILES = ("model.json", "model.ubj")
PREDICT, PREDICT_PROBA = "predict", "predict_proba"
INPUT_NAME = "input-0"
# objectives whose output is a probability: an XGBClassifier's predict_proba
PROBABILITY_OBJECTIVES = ("binary:logistic", "multi:softprob")


def is_xgboost_json(path: Any) -> bool:
    """Whether a ``.json`` file is an XGBoost model (it starts with its ``learner`` object)."""
    try:
        with open(path, "rb") as file:
            head = file.read(64)
    except OSError:
        return False
    return head.lstrip().startswith(b'{"learner"')


class XGBoostModelServer(V2ModelServer):
    """Serves one XGBoost model::

        fn.add_model("churn", model_path="models/churn/1/model.ubj",
                     class_name="mlserve.frameworks.xgboost.XGBoostModelServer")

    ``model_path`` is the model file, or a folder holding it.
    """

    platform = "xgboost"

    def load(self) -> None:
        xgb = require("xgboost", "xgboost")
        self.model_file = model_file(self.model_path, MODEL_FILES)
        try:
            self.model = xgb.Booster(model_file=str(self.model_file))
        except xgb.core.XGBoostError as exc:
            raise ValueError(f"{self.model_file} is not an XGBoost model: {exc}") from None
        config = json.loads(self.model.save_config())["learner"]
        self.objective = str(config["objective"]["name"])
        num_class = int(config["learner_model_param"].get("num_class", "0") or 0)
        sklearn = json.loads(self.model.attr("scikit_learn") or "{}")
        self.classifier = (
            sklearn.get("_estimator_type") == "classifier"
            and self.objective in PROBABILITY_OBJECTIVES
        )
        self.n_classes = max(num_class, 2) if self.classifier else 0
        self.n_features = int(self.model.num_features())
        self.feature_names = list(self.model.feature_names or []) or None
        self.methods = [PREDICT, PREDICT_PROBA] if self.classifier else [PREDICT]
        self.inputs = [{"name": INPUT_NAME, "datatype": "FP32", "shape": [-1, self.n_features]}]
        self.outputs = [self._declare(method) for method in self.methods]
        self.explainer = configured_explainer(
            self,
            self._explained,
            model=self.model,
            folder=self.model_file.parent,
            feature_names=self.feature_names,
            classes=list(range(self.n_classes)) if self.classifier else None,
        )
        run_warmup(self, self.model_file.parent)

    def _declare(self, method: str) -> dict[str, Any]:
        if method == PREDICT_PROBA:
            return {"name": method, "datatype": "FP32", "shape": [-1, self.n_classes]}
        if self.classifier:
            return {"name": method, "datatype": "INT64", "shape": [-1]}
        return {"name": method, "datatype": "FP32", "shape": [-1]}

    def get_metadata(self) -> dict[str, Any]:
        metadata = super().get_metadata()
        parameters: dict[str, Any] = {"objective": self.objective}
        if self.feature_names:
            parameters["feature_names"] = self.feature_names
        if self.model.feature_types:
            parameters["feature_types"] = list(self.model.feature_types)
        if self.classifier:
            parameters["classes"] = list(range(self.n_classes))
        metadata["parameters"] = parameters
        return metadata

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        """Tensors are checked where they are read, so any numeric type goes (it is cast)."""
        return check_request(request)

    def predict(self, request: dict[str, Any]) -> Any:
        matrix = feature_matrix(request, self.n_features, self.feature_names)
        if matrix.dtype.kind not in "biuf":
            raise InvalidInput(f"XGBoost takes numbers, got an input of {matrix.dtype} values")
        if matrix.dtype.kind == "b":
            matrix = matrix.astype(np.float32)
        names = requested_outputs(request, self.methods, [PREDICT])
        xgb = require("xgboost", "xgboost")
        try:
            raw = np.asarray(self.model.inplace_predict(matrix))
        except xgb.core.XGBoostError as exc:  # XGBoost's own input checks
            raise InvalidInput(f"XGBoost rejected the input: {exc}") from None
        outputs = {name: self._output(name, raw) for name in names}
        return outputs if isinstance(request, InferenceRequest) else rows_answer(outputs)

    def _explained(self, matrix: np.ndarray) -> np.ndarray:
        """What a model-agnostic explainer explains: ``predict_proba`` for a classifier,
        else ``predict``."""
        raw = np.asarray(self.model.inplace_predict(matrix))
        return self._output(PREDICT_PROBA if self.classifier else PREDICT, raw)

    def _output(self, name: str, raw: np.ndarray) -> np.ndarray:
        if not self.classifier:
            return raw
        proba = np.column_stack([1 - raw, raw]) if raw.ndim == 1 else raw
        if name == PREDICT_PROBA:
            return proba
        return np.argmax(proba, axis=1).astype(np.int64)
