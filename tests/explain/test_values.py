"""Each framework server's explain answers equal shap's own, called directly on the
same model, rows, explainer, background and seed (to 1e-6), in the V2 tensor form
and the mlrun rows form."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve.server.graph_server import GraphServer
from tests.explain.models import (
    BACKGROUND,
    ROWS,
    onnx_probabilities,
    save_onnx_probabilities,
    save_sklearn,
    save_xgboost,
    shap_reading_xgboost_3,
)
from tests.frameworks.models import FEATURES

shap = pytest.importorskip("shap")

SKLEARN = "mlserve.frameworks.sklearn.SKLearnModelServer"
XGBOOST = "mlserve.frameworks.xgboost.XGBoostModelServer"
ONNX = "mlserve.frameworks.onnx.ONNXModelServer"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from xgboost import XGBClassifier, XGBRegressor

    base = tmp_path_factory.mktemp("explain")
    fitted: dict[str, Any] = {"base": base}
    fitted["forest"] = save_sklearn(
        base, "forest", RandomForestClassifier(n_estimators=8, random_state=0), named=True
    )
    fitted["boosting"] = save_sklearn(
        base, "boosting", GradientBoostingRegressor(n_estimators=10, random_state=0)
    )
    fitted["logistic"] = save_sklearn(base, "logistic", LogisticRegression(max_iter=500))
    np.save(base / "logistic/1/background.npy", BACKGROUND)
    fitted["linear"] = save_sklearn(base, "linear", LinearRegression())
    fitted["xgb_reg"] = save_xgboost(base, "xgb_reg", XGBRegressor(n_estimators=10, max_depth=3))
    fitted["xgb_binary"] = save_xgboost(
        base, "xgb_binary", XGBClassifier(n_estimators=10, max_depth=2), classes=2
    )
    fitted["xgb_multi"] = save_xgboost(base, "xgb_multi", XGBClassifier(n_estimators=10))
    save_onnx_probabilities(base, "onnx")
    return fitted


@pytest.fixture(scope="module")
def server(fitted: dict[str, Any]) -> Iterator[GraphServer]:
    base = fitted["base"]
    fn = mlserve.new_function("explain")
    fn.add_model("forest", model_path=str(base / "forest/1"), class_name=SKLEARN)
    fn.add_model("boosting", model_path=str(base / "boosting/1"), class_name=SKLEARN)
    fn.add_model("logistic", model_path=str(base / "logistic/1"), class_name=SKLEARN)
    fn.add_model(
        "linear",
        model_path=str(base / "linear/1"),
        class_name=SKLEARN,
        background=BACKGROUND.tolist(),
    )
    fn.add_model("xgb_reg", model_path=str(base / "xgb_reg/1"), class_name=XGBOOST)
    fn.add_model("xgb_binary", model_path=str(base / "xgb_binary/1"), class_name=XGBOOST)
    fn.add_model(
        "xgb_binary_bg",
        model_path=str(base / "xgb_binary/1"),
        class_name=XGBOOST,
        background=BACKGROUND.tolist(),
    )
    fn.add_model("xgb_multi", model_path=str(base / "xgb_multi/1"), class_name=XGBOOST)
    fn.add_model(
        "xgb_multi_bg",
        model_path=str(base / "xgb_multi/1"),
        class_name=XGBOOST,
        background=BACKGROUND.tolist(),
    )
    fn.add_model("onnx", model_path=str(base / "onnx/1"), class_name=ONNX)
    server = fn.to_mock_server()
    yield server
    server.wait_for_completion()


def tensor_request(rows: np.ndarray, name: str = "x", datatype: str = "FP64") -> dict[str, Any]:
    data = rows.ravel().tolist()
    return {
        "inputs": [{"name": name, "datatype": datatype, "shape": list(rows.shape), "data": data}]
    }


def explain(server: GraphServer, model: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = server.test(f"/v2/models/{model}/explain", body=body)
    assert isinstance(answer, dict)
    return answer


def tensors_of(answer: dict[str, Any]) -> dict[str, np.ndarray]:
    """The answer's tensors, checked to be FP64."""
    assert all(o["datatype"] == "FP64" for o in answer["outputs"])
    return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in answer["outputs"]}


def check(
    server: GraphServer,
    model: str,
    reference: Any,
    explainer: str,
    classes: list[str],
    names: list[str] | None = None,
) -> None:
    """Both answer forms of ``model`` equal shap's ``reference`` Explanation of ROWS."""
    values = np.asarray(reference.values)
    base = np.asarray(reference.base_values)
    base = base.reshape(len(ROWS), -1)[0]
    names = names or [f"f{i}" for i in range(ROWS.shape[1])]
    per_class = [values[:, :, i] for i in range(len(classes))] if classes else [values]

    answer = explain(server, model, tensor_request(ROWS))
    tensors = tensors_of(answer)
    expected = [f"shap_values_{c}" for c in classes] if classes else ["shap_values"]
    assert list(tensors) == [*expected, "base_values"]
    for name, want in zip(expected, per_class, strict=True):
        assert tensors[name].shape == ROWS.shape
        np.testing.assert_allclose(tensors[name], want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(tensors["base_values"], base, rtol=0, atol=1e-6)
    assert answer["parameters"] == {
        "feature_names": names,
        "explainer": explainer,
        "classes": classes,
    }

    rows = explain(server, model, {"inputs": ROWS.tolist()})["outputs"]
    assert rows["explainer"] == explainer and rows["feature_names"] == names
    got = rows["shap_values"]
    if classes:
        assert list(got) == classes
        for label, want in zip(classes, per_class, strict=True):
            np.testing.assert_allclose(got[label], want, rtol=0, atol=1e-6)
    else:
        np.testing.assert_allclose(got, values, rtol=0, atol=1e-6)
    np.testing.assert_allclose(rows["base_values"], base, rtol=0, atol=1e-6)


def test_random_forest_classifier_tree_per_class_probability(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    import pandas as pd

    model = fitted["forest"]
    reference = shap.TreeExplainer(model)(pd.DataFrame(ROWS, columns=FEATURES))
    check(server, "forest", reference, "tree", ["0", "1", "2"], FEATURES)


@pytest.mark.parametrize("count", [1, 3])
def test_a_three_class_tree_answers_a_base_value_per_class_whatever_the_rows(
    server: GraphServer, fitted: dict[str, Any], count: int
) -> None:
    """One row (the common request) and as many rows as classes (where a per-class base
    could pass for a per-row one): one base value per class, shap's own."""
    import pandas as pd

    rows = ROWS[:count]
    reference = shap.TreeExplainer(fitted["forest"])(pd.DataFrame(rows, columns=FEATURES))
    answer = tensors_of(explain(server, "forest", tensor_request(rows)))
    assert answer["base_values"].shape == (3,)
    base = np.asarray(reference.base_values)[0]
    np.testing.assert_allclose(answer["base_values"], base, rtol=0, atol=1e-6)
    for k in range(3):
        want = np.asarray(reference.values)[:, :, k]
        np.testing.assert_allclose(answer[f"shap_values_{k}"], want, rtol=0, atol=1e-6)


def test_gradient_boosting_regressor_tree(server: GraphServer, fitted: dict[str, Any]) -> None:
    reference = shap.TreeExplainer(fitted["boosting"])(ROWS)
    check(server, "boosting", reference, "tree", [])


def test_logistic_regression_linear_with_a_background_file(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    reference = shap.LinearExplainer(fitted["logistic"], BACKGROUND)(ROWS)
    check(server, "logistic", reference, "linear", ["0", "1", "2"])


def test_linear_regression_linear_with_a_background_parameter(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    reference = shap.LinearExplainer(fitted["linear"], BACKGROUND)(ROWS)
    check(server, "linear", reference, "linear", [])


def test_xgboost_regressor_tree_reads_xgboost_3_base_score(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    booster = fitted["xgb_reg"].get_booster()
    assert booster.save_config().count('"base_score":"[') == 1  # the case shap 0.48 cannot read
    with shap_reading_xgboost_3() as shap_:
        reference = shap_.TreeExplainer(booster)(ROWS)
    check(server, "xgb_reg", reference, "tree", [])


def test_xgboost_binary_classifier_tree_explains_the_margin(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    booster = fitted["xgb_binary"].get_booster()
    with shap_reading_xgboost_3() as shap_:
        reference = shap_.TreeExplainer(booster)(ROWS)
        interventional = shap_.TreeExplainer(booster, BACKGROUND)(ROWS)
    check(server, "xgb_binary", reference, "tree", [])
    check(server, "xgb_binary_bg", interventional, "tree", [])
    # the margin: values and base add up to XGBoost's log-odds
    margin = booster.inplace_predict(ROWS, predict_type="margin")
    answer = tensors_of(explain(server, "xgb_binary", tensor_request(ROWS)))
    total = answer["shap_values"].sum(axis=1) + answer["base_values"][0]
    np.testing.assert_allclose(total, margin, rtol=0, atol=1e-5)


def test_xgboost_multiclass_base_score_per_class(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    """XGBoost 3 keeps one base score per class, which no shap 0.48 reads: the values
    are XGBoost's own contributions (what shap's path-dependent explainer returns for
    XGBoost), and with a background they add up to the margin per class."""
    import xgboost as xgb

    booster = fitted["xgb_multi"].get_booster()
    scores = booster.save_config().split('"base_score":"[')[1].split("]")[0]
    assert scores.count(",") == 2
    contributions = booster.predict(xgb.DMatrix(ROWS), pred_contribs=True)  # rows, class, f+1
    margin = booster.inplace_predict(ROWS, predict_type="margin")
    answer = tensors_of(explain(server, "xgb_multi", tensor_request(ROWS)))
    for k in range(3):
        np.testing.assert_allclose(
            answer[f"shap_values_{k}"], contributions[:, k, :-1], rtol=0, atol=1e-6
        )
        np.testing.assert_allclose(answer["base_values"][k], contributions[0, k, -1], atol=1e-6)
    interventional = tensors_of(explain(server, "xgb_multi_bg", tensor_request(ROWS)))
    for k in range(3):
        total = interventional[f"shap_values_{k}"].sum(axis=1) + interventional["base_values"][k]
        np.testing.assert_allclose(total, margin[:, k], rtol=0, atol=1e-5)


def test_onnx_permutation_with_a_background_file(
    server: GraphServer, fitted: dict[str, Any]
) -> None:
    predict = onnx_probabilities(fitted["base"] / "onnx/1/model.onnx")
    reference = shap.explainers.Permutation(predict, BACKGROUND, seed=0)(ROWS, max_evals=500)
    check(server, "onnx", reference, "permutation", ["0", "1", "2"])
    # the same request, the same values
    again = tensors_of(explain(server, "onnx", tensor_request(ROWS)))
    np.testing.assert_allclose(again["shap_values_0"], reference.values[:, :, 0], atol=1e-6)
