"""Explain beyond the framework servers' values: a user model's one-line explainer,
a TensorFlow model, feature names, the 4xx answers (no background, bad rows), a
model without an explainer, and shap missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve.frameworks.explainers import Explanation, shap_explainer
from mlserve.model import V2ModelServer
from mlserve.server.graph_server import GraphServer
from tests.explain.models import BACKGROUND, ROWS, save_onnx_probabilities, save_sklearn
from tests.explain.test_values import explain, tensor_request, tensors_of
from tests.frameworks.models import FEATURES

shap = pytest.importorskip("shap")

SKLEARN = "mlserve.frameworks.sklearn.SKLearnModelServer"
ONNX = "mlserve.frameworks.onnx.ONNXModelServer"


def weighted(matrix: np.ndarray) -> np.ndarray:
    """The user model: a plain function of the features, with an interaction."""
    return matrix @ np.array([1.0, -2.0, 0.5, 3.0]) + matrix[:, 0] * matrix[:, 1]


class Scorer:
    def predict(self, matrix: np.ndarray) -> np.ndarray:
        return weighted(np.asarray(matrix, dtype=np.float64))


class ExplainedModel(V2ModelServer):
    """A user model: one line in load() makes its explain route answer."""

    def load(self) -> None:
        self.model = Scorer()
        self.explainer = shap_explainer(self.model.predict, BACKGROUND)

    def predict(self, request: dict[str, Any]) -> Any:
        return self.model.predict(request["inputs"]).tolist()


class OwnExplain(V2ModelServer):
    """A user model that writes explain itself, as before explainers."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [0]

    def explain(self, request: dict[str, Any]) -> Any:
        return {"why": "because"}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sklearn.linear_model import LinearRegression
    from sklearn.svm import SVC

    base = tmp_path_factory.mktemp("explain-servers")
    save_sklearn(base, "linear", LinearRegression(), named=True)
    save_sklearn(base, "svc", SVC(), named=False)  # no predict_proba: its decision function
    save_onnx_probabilities(base, "onnx")
    (base / "onnx/1/background.csv").unlink()  # no background: a 400 that says how
    return base


@pytest.fixture(scope="module")
def server(base: Path) -> Iterator[GraphServer]:
    fn = mlserve.new_function("explain-servers")
    fn.add_model("user", class_name=ExplainedModel)
    fn.add_model(
        "user_named",
        class_name=ExplainedModel,
        inputs=[{"name": name, "datatype": "FP64", "shape": [-1]} for name in FEATURES],
    )
    fn.add_model("own", class_name=OwnExplain, model=object())
    fn.add_model("plain", class_name=OwnExplain.__base__, model=object())
    fn.add_model("linear", model_path=str(base / "linear/1"), class_name=SKLEARN)
    fn.add_model(
        "svc",
        model_path=str(base / "svc/1"),
        class_name=SKLEARN,
        background=BACKGROUND.tolist(),
        max_evals=600,
    )
    fn.add_model("onnx", model_path=str(base / "onnx/1"), class_name=ONNX)
    server = fn.to_mock_server()
    yield server
    server.wait_for_completion()


def refused(server: GraphServer, model: str, body: dict[str, Any], status: int = 400) -> str:
    response = server.test(f"/v2/models/{model}/explain", body=body, silent=True)
    assert response.status_code == status, response.body
    return str(response.body["error"])


def test_a_user_model_explains_with_the_helper_as_shap_does(server: GraphServer) -> None:
    reference = shap.explainers.Permutation(weighted, BACKGROUND, seed=0)(ROWS, max_evals=500)
    answer = explain(server, "user", tensor_request(ROWS))
    tensors = tensors_of(answer)
    np.testing.assert_allclose(tensors["shap_values"], reference.values, rtol=0, atol=1e-6)
    np.testing.assert_allclose(tensors["base_values"], reference.base_values[:1], atol=1e-6)
    assert answer["parameters"]["explainer"] == "permutation"
    rows = explain(server, "user", {"inputs": ROWS.tolist()})["outputs"]
    np.testing.assert_allclose(rows["shap_values"], reference.values, rtol=0, atol=1e-6)
    assert rows["feature_names"] == ["f0", "f1", "f2", "f3"]


def test_a_user_models_declared_inputs_name_the_features(server: GraphServer) -> None:
    """One tensor per declared feature goes in; the answer names them."""
    body = {
        "inputs": [
            {"name": name, "datatype": "FP64", "shape": [len(ROWS)], "data": ROWS[:, i].tolist()}
            for i, name in enumerate(FEATURES)
        ]
    }
    answer = explain(server, "user_named", body)
    assert answer["parameters"]["feature_names"] == FEATURES
    whole = tensors_of(explain(server, "user", tensor_request(ROWS)))["shap_values"]
    np.testing.assert_allclose(tensors_of(answer)["shap_values"], whole, atol=1e-12)


def test_a_models_own_explain_still_answers_and_none_is_a_501(server: GraphServer) -> None:
    assert explain(server, "own", {"inputs": [[1]]})["outputs"] == {"why": "because"}
    error = refused(server, "plain", {"inputs": [[1]]}, status=501)
    assert error == "NotImplementedError: model plain has no explain()"


def test_a_linear_model_without_a_background_is_a_400_that_says_how(server: GraphServer) -> None:
    error = refused(server, "linear", {"inputs": ROWS.tolist()})
    assert "background" in error and "background.npy" in error


def test_a_classifier_without_probabilities_explains_its_decision_function(
    server: GraphServer, base: Path
) -> None:
    import joblib

    svc = joblib.load(base / "svc/1/model.joblib")
    reference = shap.explainers.Permutation(svc.decision_function, BACKGROUND, seed=0)(
        ROWS, max_evals=600
    )
    answer = explain(server, "svc", tensor_request(ROWS))
    tensors = tensors_of(answer)
    for k in range(3):
        np.testing.assert_allclose(
            tensors[f"shap_values_{k}"], reference.values[:, :, k], rtol=0, atol=1e-6
        )
    assert answer["parameters"]["classes"] == ["0", "1", "2"]


def test_missing_background_and_bad_rows_are_clear_400s(server: GraphServer) -> None:
    error = refused(server, "onnx", tensor_request(ROWS))
    assert "needs a background sample" in error and "'background' parameter" in error
    assert "features per row" in refused(server, "user", {"inputs": [[1.0, 2.0]]})
    assert "numbers" in refused(server, "user", {"inputs": [["a", "b", "c", "d"]]})
    # the model still predicts
    assert server.test("/v2/models/user/infer", body={"inputs": ROWS.tolist()})["outputs"]


def test_explanation_answer_forms() -> None:
    """The forms the console and the v1 route read (docs/frameworks.md#explanations)."""
    values = np.arange(12.0).reshape(2, 3, 2)
    explanation = Explanation(values, np.array([0.5, 1.5]), ["a", "b", "c"], ["no", "yes"], "tree")
    outputs = explanation.tensor_outputs()
    assert list(outputs) == ["shap_values_no", "shap_values_yes", "base_values"]
    assert outputs.parameters == {
        "feature_names": ["a", "b", "c"],
        "explainer": "tree",
        "classes": ["no", "yes"],
    }
    assert explanation.rows_outputs() == {
        "shap_values": {"no": values[:, :, 0].tolist(), "yes": values[:, :, 1].tolist()},
        "base_values": [0.5, 1.5],
        "feature_names": ["a", "b", "c"],
        "explainer": "tree",
    }


def test_a_tensorflow_model_explains_with_permutation(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("tensorflow")
    import tensorflow as tf

    from tests.tf_models import tf_models

    mlp = tf_models(tmp_path_factory).mlp
    signature = tf.saved_model.load(str(mlp / "1")).signatures["serving_default"]

    def outputs(matrix: np.ndarray) -> np.ndarray:
        result = signature(inputs=tf.constant(matrix, tf.float32))["output_0"]
        return np.asarray(result.numpy(), dtype=np.float64)

    reference = shap.explainers.Permutation(outputs, BACKGROUND, seed=0)(ROWS, max_evals=500)
    fn = mlserve.new_function("explain-tf")
    fn.add_model(
        "mlp",
        model_path=str(mlp),
        class_name="mlserve.frameworks.tensorflow.TFModelServer",
        background=BACKGROUND.tolist(),
    )
    server = fn.to_mock_server()
    try:
        tensors = tensors_of(explain(server, "mlp", tensor_request(ROWS, "inputs", "FP32")))
    finally:
        server.wait_for_completion()
    for k in range(3):
        np.testing.assert_allclose(
            tensors[f"shap_values_{k}"], reference.values[:, :, k], rtol=0, atol=1e-6
        )


def test_without_shap_explain_names_the_extra_and_predict_still_works(base: Path) -> None:
    """shap blocked in a fresh interpreter: explain is a 501 naming the extra."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["shap"] = None  # import shap fails
        import mlserve
        fn = mlserve.new_function("no-shap")
        fn.add_model("m", model_path={str(base / "svc/1")!r},
                     class_name={SKLEARN!r}, background=[[0.0, 0.0, 0.0, 0.0]])
        server = fn.to_mock_server()
        rows = {{"inputs": [[0.1, 0.2, 0.3, 0.4]]}}
        explained = server.test("/v2/models/m/explain", body=rows, silent=True)
        predicted = server.test("/v2/models/m/infer", body=rows)
        print(json.dumps([explained.status_code, explained.body, predicted["outputs"]]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    status, body, outputs = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert status == 501
    assert "pip install 'mlserve[explain]'" in body["error"]
    assert len(outputs) == 1


def test_the_kernel_explainer_is_shaps_with_the_same_seed() -> None:
    background = BACKGROUND[:6]
    explanation = shap_explainer(weighted, background, kind="kernel", max_evals=60).explain(ROWS)
    np.random.seed(0)
    kernel = shap.KernelExplainer(weighted, background)
    reference = kernel.shap_values(ROWS, nsamples=60, silent=True)
    np.testing.assert_allclose(explanation.values, reference, rtol=0, atol=1e-6)
    np.testing.assert_allclose(explanation.base_values, [kernel.expected_value], atol=1e-6)
    assert explanation.explainer == "kernel"


def test_an_xgboost_feature_named_base_score_is_not_rewritten() -> None:
    import pandas as pd
    import xgboost as xgb

    names = ["base_score", "b", "c", "d"]
    model = xgb.XGBRegressor(n_estimators=5, max_depth=2)
    model.fit(pd.DataFrame(BACKGROUND, columns=names), BACKGROUND @ np.array([1.0, 2, 3, 4]))
    booster = model.get_booster()
    explanation = shap_explainer(None, model=booster).explain(ROWS)
    contributions = booster.predict(xgb.DMatrix(ROWS, feature_names=names), pred_contribs=True)
    np.testing.assert_allclose(explanation.values, contributions[:, :-1], rtol=0, atol=1e-6)
    assert explanation.feature_names == names  # the model's own
