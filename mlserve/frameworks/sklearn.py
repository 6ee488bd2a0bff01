"""``SKLearnModelServer``: a pickled scikit-learn estimator served as a ``V2ModelServer``
(docs/frameworks.md#scikit-learn).

The model is ``model.joblib``, ``model.pkl`` or ``model.pickle`` (read with
``joblib.load``, which reads plain pickles too). Unpickling runs code: the
file comes only from ``model_path`` (the configured repository or the path
given to ``add_model``), never from a request.

Outputs, as MLServer's and KServe's scikit-learn servers name them:
``predict`` (the default) and, for estimators that have it, ``predict_proba``;
a request's ``outputs`` picks which are computed. Metadata comes from the
estimator: one ``[-1, n_features_in_]`` input, and in ``parameters`` the
estimator's class, its ``feature_names_in_`` and its ``classes_``. A model
fit on named features also takes one ``[rows]`` tensor per feature.
Warm-up requests beside the model file run before it is ready
(mlserve.frameworks.warmup).

Explain answers SHAP values (mlserve.frameworks.explainers,
docs/frameworks.md#explanations): shap's tree explainer for forests and
boosting (what shap explains for them: the probability per class for forests,
the log-odds for gradient boosting), its linear explainer for linear models
(the decision function), else a permutation explainer over a background
sample of ``predict_proba``, else ``decision_function``, else ``predict``.
"""

from __future__ import annotations

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
from mlserve.protocol.tensors import datatype_of

__all__ = ["MODEL_FILES", "SKLearnModelServer"]

MODEL_FILES = ("model.joblib", "model.pkl", "model.pickle")
PREDICT, PREDICT_PROBA, DECISION = "predict", "predict_proba", "decision_function"
INPUT_NAME = "input-0"


class SKLearnModelServer(V2ModelServer):
    """Serves one pickled scikit-learn estimator (or pipeline)::

        fn.add_model("iris", model_path="models/iris/1/model.joblib",
                     class_name="mlserve.frameworks.sklearn.SKLearnModelServer")

    ``model_path`` is the model file, or a folder holding it.
    """

    platform = "sklearn"

    def load(self) -> None:
        joblib = require("joblib", "sklearn")
        require("sklearn", "sklearn")
        self.model_file = model_file(self.model_path, MODEL_FILES)
        self.model = joblib.load(self.model_file)
        if not hasattr(self.model, PREDICT):
            raise TypeError(f"{self.model_file} holds a {type(self.model).__name__}, no predict()")
        self.n_features: int | None = getattr(self.model, "n_features_in_", None)
        names = getattr(self.model, "feature_names_in_", None)
        self.feature_names = [str(n) for n in names] if names is not None else None
        self.methods = [m for m in (PREDICT, PREDICT_PROBA) if _has_method(self.model, m)]
        self.inputs = [
            {"name": INPUT_NAME, "datatype": "FP64", "shape": [-1, self.n_features or -1]}
        ]
        self.outputs = [self._declare(method) for method in self.methods]
        classes = getattr(self.model, "classes_", None)
        self.explainer = configured_explainer(
            self,
            self._explained,
            model=self.model,
            folder=self.model_file.parent,
            feature_names=self.feature_names,
            classes=list(classes) if classes is not None and np.ndim(classes) == 1 else None,
        )
        run_warmup(self, self.model_file.parent)

    def _declare(self, method: str) -> dict[str, Any]:
        classes = getattr(self.model, "classes_", None)
        if method == PREDICT_PROBA:
            width = len(classes) if classes is not None and np.ndim(classes) == 1 else -1
            return {"name": method, "datatype": "FP64", "shape": [-1, width]}
        if classes is not None and np.ndim(classes) == 1:
            return {"name": method, "datatype": datatype_of(np.asarray(classes)), "shape": [-1]}
        n_outputs = int(getattr(self.model, "n_outputs_", 1) or 1)
        return {"name": method, "datatype": "FP64", "shape": [-1] if n_outputs == 1 else [-1, -1]}

    def get_metadata(self) -> dict[str, Any]:
        metadata = super().get_metadata()
        parameters: dict[str, Any] = {"estimator": type(self.model).__name__}
        if self.feature_names:
            parameters["feature_names"] = self.feature_names
        classes = getattr(self.model, "classes_", None)
        if classes is not None and np.ndim(classes) == 1:
            parameters["classes"] = np.asarray(classes).tolist()
        metadata["parameters"] = parameters
        return metadata

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        """Tensors are checked where they are read, so any numeric type goes (it is cast)."""
        return check_request(request)

    def predict(self, request: dict[str, Any]) -> Any:
        features = self._features(feature_matrix(request, self.n_features, self.feature_names))
        names = requested_outputs(request, self.methods, [PREDICT])
        try:
            outputs = {name: np.asarray(getattr(self.model, name)(features)) for name in names}
        except (ValueError, TypeError) as exc:  # the estimator's own input checks
            raise InvalidInput(f"{type(self.model).__name__} rejected the input: {exc}") from None
        return outputs if isinstance(request, InferenceRequest) else rows_answer(outputs)

    def _explained(self, matrix: np.ndarray) -> np.ndarray:
        """What a model-agnostic explainer explains: the probability per class when the
        estimator has it, else its decision function, else ``predict``."""
        features = self._features(matrix)
        method = next(m for m in (PREDICT_PROBA, DECISION, PREDICT) if _has_method(self.model, m))
        return np.asarray(getattr(self.model, method)(features), dtype=np.float64)

    def _features(self, matrix: np.ndarray) -> Any:
        """A model fit on a DataFrame gets one back (with its column names), when pandas is here."""
        if not self.feature_names:
            return matrix
        try:
            import pandas as pd
        except ImportError:
            return matrix
        return pd.DataFrame(matrix, columns=self.feature_names)


def _has_method(model: object, name: str) -> bool:
    # a pipeline or SVC(probability=False) exposes predict_proba only when its final step can
    try:
        return callable(getattr(model, name))
    except AttributeError:
        return False
