"""Explain as an independent reviewer checks it (docs/explain.md): models the other
explain tests do not use, saved in a model repository and served by a real
``mlserve serve`` as the docs say, explained by V2 tensors, mlrun rows and KServe's v1
route, equal to shap called directly (to 1e-6); explainer parameters from the
repository configuration's ``class_args``; bad inputs are 4xx and the server serves on;
a framework model's explain calls are logged with ``op: explain``; the console's
Explain button draws a regressor and a three-class model."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest

import mlserve
from mlserve.model import V2ModelServer
from tests.explain.models import shap_reading_xgboost_3
from tests.netserver import ServerProcess, start_server

if TYPE_CHECKING:
    from playwright.sync_api import Page

shap = pytest.importorskip("shap")

FEATURES = 5
DATA = np.random.default_rng(7).normal(size=(120, FEATURES))
TARGET = DATA @ np.array([1.0, -2.0, 0.5, 3.0, 0.0]) + DATA[:, 0] * DATA[:, 1]
THREE = np.digitize(DATA[:, 0] + DATA[:, 3], [-0.5, 0.5])  # classes 0, 1, 2
TWO = (DATA[:, 1] > 0).astype(int)
ROWS = DATA[:3] + 0.1
BACKGROUND = DATA[50:70]
NAMES = ["c0", "c1", "c2", "c3", "c4"]  # the DataFrame model's columns
GIVEN = ["a", "b", "c", "d", "e"]  # the feature_names class_args give
Reference = tuple[str, np.ndarray, np.ndarray]  # explainer, values, base values of ROWS


class Plain(V2ModelServer):
    """A user model with no explainer and no explain of its own."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [0 for _ in request["inputs"]]


def permutation(predict: Callable[[np.ndarray], Any]) -> Any:
    """shap's Permutation as docs/frameworks.md#explanations says: seed 0, 500 evals."""
    return shap.explainers.Permutation(predict, BACKGROUND, seed=0)(ROWS, max_evals=500)


def folder(repo: Path, name: str) -> Path:
    path = repo / name / "1"
    path.mkdir(parents=True)
    return path


def save_sklearn(repo: Path, name: str, estimator: Any, target: np.ndarray) -> Any:
    import joblib
    import pandas as pd

    estimator.fit(pd.DataFrame(DATA, columns=NAMES) if name == "forest_df" else DATA, target)
    path = folder(repo, name)
    joblib.dump(estimator, path / "model.joblib")
    np.save(path / "background.npy", BACKGROUND)  # read by all but the tree explainer
    return estimator


def sklearn_models(repo: Path) -> dict[str, Reference]:
    import pandas as pd
    from sklearn.ensemble import (
        ExtraTreesRegressor,
        HistGradientBoostingClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVR

    def tree(name: str, estimator: Any, target: np.ndarray, rows: Any = ROWS) -> Reference:
        # the background file beside the model makes it interventional
        fitted = save_sklearn(repo, name, estimator, target)
        result = shap.TreeExplainer(fitted, BACKGROUND)(rows)
        return "tree", result.values, result.base_values

    def linear(name: str, estimator: Any, target: np.ndarray) -> Reference:
        fitted = save_sklearn(repo, name, estimator, target)
        result = shap.LinearExplainer(fitted, BACKGROUND)(ROWS)
        return "linear", result.values, result.base_values

    refs = {
        "extra_trees": tree("extra_trees", ExtraTreesRegressor(8, random_state=0), TARGET),
        "hist3": tree("hist3", HistGradientBoostingClassifier(max_iter=8), THREE),
        "forest_df": tree(
            "forest_df",
            RandomForestRegressor(8, random_state=0),
            TARGET,
            pd.DataFrame(ROWS, columns=NAMES),
        ),
        "ridge": linear("ridge", Ridge(), TARGET),
        "logistic3": linear("logistic3", LogisticRegression(max_iter=500), THREE),
    }
    # a Pipeline is no linear_model: the model-agnostic explainer of its probabilities
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    result = permutation(save_sklearn(repo, "pipeline", pipe, THREE).predict_proba)
    refs["pipeline"] = ("permutation", result.values, result.base_values)
    support = save_sklearn(repo, "support", SVR(), TARGET)
    (repo / "support/1/background.npy").unlink()  # given by class_args instead
    result = permutation(support.predict)
    refs["support"] = ("permutation", result.values, result.base_values)
    return refs


def xgboost_models(repo: Path) -> dict[str, Reference]:
    import xgboost as xgb

    regressor = xgb.XGBRegressor(n_estimators=8, max_depth=3).fit(DATA, TARGET)
    regressor.save_model(folder(repo, "xgb_ubj") / "model.ubj")
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3}, xgb.DMatrix(DATA, TWO))
    booster.save_model(folder(repo, "booster") / "model.json")
    with shap_reading_xgboost_3() as shap_:
        by_tree = shap_.TreeExplainer(regressor)(ROWS)
        by_train = shap_.TreeExplainer(booster)(ROWS)
    return {
        "xgb_ubj": ("tree", by_tree.values, by_tree.base_values),
        "booster": ("tree", by_train.values, by_train.base_values),
    }


def onnx_model(repo: Path) -> dict[str, Reference]:
    """A classifier converted without a ZipMap: its probabilities are a plain tensor."""
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    estimator = LogisticRegression(max_iter=500).fit(DATA, THREE)
    converted = to_onnx(
        estimator,
        DATA[:1].astype(np.float32),
        target_opset=17,
        options={id(estimator): {"zipmap": False}},
    )
    path = folder(repo, "onnx_plain")
    (path / "model.onnx").write_bytes(converted.SerializeToString())
    np.save(path / "background.npy", BACKGROUND)
    session = ort.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])

    def probabilities(matrix: np.ndarray) -> np.ndarray:
        (result,) = session.run(["probabilities"], {"X": matrix.astype(np.float32)})
        return np.asarray(result, dtype=np.float64)

    result = permutation(probabilities)
    return {"onnx_plain": ("permutation", result.values, result.base_values)}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Reference]]:
    repo = tmp_path_factory.mktemp("review-repo")
    refs = {**sklearn_models(repo), **xgboost_models(repo), **onnx_model(repo)}
    config = {
        "models": [
            *({"name": name} for name in refs if name != "support"),
            {
                "name": "support",
                "class_args": {
                    "background": BACKGROUND.tolist(),
                    "feature_names": GIVEN,
                    "explain_max_rows": 3,
                },
            },
            {"name": "plain", "class_name": f"{__name__}.Plain"},
        ]
    }
    (repo / "plain/1").mkdir(parents=True)
    (repo / "models.yaml").write_text(json.dumps(config))  # JSON is YAML
    return repo, refs


@pytest.fixture(scope="module")
def served(repo: tuple[Path, dict[str, Reference]]) -> Iterator[ServerProcess]:
    folder_, _ = repo
    server = start_server("--model-config", str(folder_ / "models.yaml"), target=str(folder_))
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def http(served: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=120) as client:
        yield client


def tensor_body(rows: np.ndarray, datatype: str = "FP64") -> dict[str, Any]:
    data = rows.ravel().tolist()
    return {
        "inputs": [{"name": "x", "datatype": datatype, "shape": list(rows.shape), "data": data}]
    }


def per_output(values: np.ndarray) -> list[np.ndarray]:
    """shap's [rows, features(, outputs)] values as one [rows, features] array per output."""
    return [values[:, :, k] for k in range(values.shape[2])] if values.ndim == 3 else [values]


MODELS = [
    "extra_trees",
    "hist3",
    "forest_df",
    "ridge",
    "logistic3",
    "pipeline",
    "support",
    "xgb_ubj",
    "booster",
    "onnx_plain",
]


@pytest.mark.parametrize("model", MODELS)
def test_a_served_model_explains_as_shap_does_in_every_form(
    repo: tuple[Path, dict[str, Reference]], http: httpx.Client, model: str
) -> None:
    kind, values, base_values = repo[1][model]
    wanted = per_output(np.asarray(values))
    base = np.asarray(base_values).reshape(len(ROWS), -1)[0]
    names = {"forest_df": NAMES, "support": GIVEN}.get(model)
    names = names or [f"f{i}" for i in range(FEATURES)]

    answer = http.post(f"/v2/models/{model}/explain", json=tensor_body(ROWS))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["parameters"]["explainer"] == kind
    assert body["parameters"]["feature_names"] == names
    tensors = {o["name"]: np.reshape(o["data"], o["shape"]) for o in body["outputs"]}
    assert len(tensors) == len(wanted) + 1
    for got, want in zip(list(tensors.values())[:-1], wanted, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(tensors["base_values"], base, rtol=0, atol=1e-6)

    rows = http.post(f"/v2/models/{model}/explain", json={"inputs": ROWS.tolist()}).json()
    shap_values = rows["outputs"]["shap_values"]
    got_rows = [shap_values] if isinstance(shap_values, list) else list(shap_values.values())
    for answered, want in zip(got_rows, wanted, strict=True):
        np.testing.assert_allclose(answered, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(rows["outputs"]["base_values"], base, rtol=0, atol=1e-6)

    v1 = http.post(f"/v1/models/{model}:explain", json={"instances": ROWS.tolist()})
    assert v1.status_code == 200, v1.text
    for i, explanation in enumerate(v1.json()["explanations"]):
        assert explanation["feature_names"] == names
        by_output = explanation["shap_values"]
        got_v1 = [by_output] if isinstance(by_output, list) else list(by_output.values())
        for given, want in zip(got_v1, wanted, strict=True):
            np.testing.assert_allclose(given, want[i], rtol=0, atol=1e-6)
        bases = explanation["base_values"]
        bases = list(bases.values()) if isinstance(bases, dict) else [bases]
        np.testing.assert_allclose(bases, base, rtol=0, atol=1e-6)


def test_v1_instances_may_be_objects_by_the_given_feature_names(http: httpx.Client) -> None:
    row = dict(zip(GIVEN, ROWS[0].tolist(), strict=True))
    by_name = http.post("/v1/models/support:explain", json={"instances": [row]})
    by_place = http.post("/v1/models/support:explain", json={"instances": ROWS[:1].tolist()})
    assert by_name.status_code == 200, by_name.text
    assert by_name.json() == by_place.json()


BAD = {
    "too few features": {"inputs": [[1.0, 2.0, 3.0]]},
    "a tensor of too few features": tensor_body(np.ones((1, 3))),
    "strings": {"inputs": [["a", "b", "c", "d", "e"]]},
    "no rows": {"inputs": []},
    "a tensor of no rows": tensor_body(np.ones((0, FEATURES))),
    "ragged rows": {"inputs": [[1, 2, 3, 4, 5], [1, 2]]},
    "no inputs": {},
    # finite as FP64, infinite as XGBoost's FP32: XGBoost rejects it
    "a value too large": {"inputs": [[1e39, 0, 0, 0, 0]]},
}


@pytest.mark.parametrize("model", ["extra_trees", "ridge", "xgb_ubj", "booster", "onnx_plain"])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_explain_requests_are_4xx_and_the_server_serves_on(
    http: httpx.Client, model: str, case: str
) -> None:
    answer = http.post(f"/v2/models/{model}/explain", json=BAD[case])
    if case == "a value too large" and not model.startswith(("xgb", "booster")):
        assert answer.status_code == 200, answer.text  # a float64 model takes it
    else:
        assert 400 <= answer.status_code < 500, answer.text
        assert answer.json()["error"]
    assert http.post(f"/v2/models/{model}/infer", json={"inputs": ROWS.tolist()}).status_code == 200
    explained = http.post(f"/v2/models/{model}/explain", json={"inputs": ROWS[:1].tolist()})
    assert explained.status_code == 200


def test_the_bad_answers_say_what_is_wrong(http: httpx.Client) -> None:
    empty = http.post("/v2/models/extra_trees/explain", json=BAD["a tensor of no rows"])
    assert empty.json() == {"error": "InvalidInput: explain takes at least one row"}
    large = http.post("/v2/models/xgb_ubj/explain", json=BAD["a value too large"])
    error = large.json()["error"]
    assert error.startswith("InvalidInput: the model rejected the input: ") and "\n" not in error
    for route, body in [
        ("/v2/models/support/explain", {"inputs": DATA[:4].tolist()}),
        ("/v2/models/support/explain", tensor_body(DATA[:4])),
        ("/v1/models/support:explain", {"instances": DATA[:4].tolist()}),
    ]:
        many = http.post(route, json=body)
        assert many.status_code == 413, many.text
        assert "3 rows at most" in many.json()["error"]
    v1 = http.post("/v1/models/ridge:explain", json={"instances": [[1, 2]]})
    assert v1.status_code == 400


def test_a_model_without_an_explainer_says_so_on_both_routes(http: httpx.Client) -> None:
    v2 = http.post("/v2/models/plain/explain", json={"inputs": [[1, 2]]})
    v1 = http.post("/v1/models/plain:explain", json={"instances": [[1, 2]]})
    assert v2.status_code == v1.status_code == 501, (v2.text, v1.text)
    assert v2.json() == v1.json()
    assert http.post("/v2/models/plain/infer", json={"inputs": [[1, 2]]}).status_code == 200


def test_a_framework_models_explain_calls_are_logged_with_op_explain(
    repo: tuple[Path, dict[str, Reference]], tmp_path: Path
) -> None:
    log = tmp_path / "log.jsonl"
    fn = mlserve.new_function("review-log")
    fn.add_model(
        "ridge",
        model_path=str(repo[0] / "ridge/1"),
        class_name="mlserve.frameworks.sklearn.SKLearnModelServer",
    )
    fn.set_tracking(f"file://{log}")
    server = fn.to_mock_server()
    server.test("/v2/models/ridge/infer", body={"id": "i", "inputs": ROWS.tolist()})
    server.test("/v2/models/ridge/explain", body={"id": "rows", "inputs": ROWS.tolist()})
    server.test("/v2/models/ridge/explain", body={"id": "tensor", **tensor_body(ROWS)})
    server.wait_for_completion()
    records = {r["request"]["id"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert [records[i]["op"] for i in ("i", "rows", "tensor")] == ["infer", "explain", "explain"]
    _, values, _ = repo[1]["ridge"]
    logged = records["rows"]["resp"]["outputs"]["shap_values"]
    np.testing.assert_allclose(logged, values, rtol=0, atol=1e-6)
    assert "error" not in records["tensor"]


@pytest.mark.parametrize(
    ("model", "classes"), [("extra_trees", []), ("logistic3", ["0", "1", "2"])]
)
def test_the_console_draws_a_regressor_and_a_three_class_model(
    repo: tuple[Path, dict[str, Reference]],
    served: ServerProcess,
    page: Page,
    model: str,
    classes: list[str],
) -> None:
    from tests.console.test_console_browser import open_view, wait_until, watch
    from tests.console.test_console_explain import bars

    seen = watch(page, served)
    open_view(page, served, f"#/try/{model}", "try")
    body = page.locator("textarea[data-tryit-body]")
    assert wait_until(lambda: body.input_value().strip())
    body.fill(json.dumps(tensor_body(ROWS[:1])))
    page.click("button[data-tryit-explain]")
    page.wait_for_selector("svg[data-explain-chart]", timeout=15_000)
    _, values, _ = repo[1][model]
    names = [f"f{i}" for i in range(FEATURES)]
    for k, want in enumerate(per_output(np.asarray(values))):
        if classes:
            page.locator("select[data-explain-class]").select_option(str(k))
        expected = dict(zip(names, want[0].tolist(), strict=True))

        def drawn(expected: dict[str, float] = expected) -> bool:
            return bool(dict(bars(page)) == pytest.approx(expected))

        assert wait_until(drawn, timeout=5)
    picker = page.locator("select[data-explain-class] option")
    assert picker.all_inner_texts() == classes  # one output: no class picker
    seen.assert_clean()


def test_explainer_parameters_choose_shaps_explainer_and_a_wrong_one_spares_inference(
    repo: tuple[Path, dict[str, Reference]],
) -> None:
    import joblib

    ridge = repo[0] / "ridge/1"
    fn = mlserve.new_function("review-parameters")
    sklearn = "mlserve.frameworks.sklearn.SKLearnModelServer"
    fn.add_model(
        "kernel", model_path=str(ridge), class_name=sklearn, explainer="kernel", max_evals=100
    )
    fn.add_model("unknown", model_path=str(ridge), class_name=sklearn, explainer="magic")
    fn.add_model("evals", model_path=str(ridge), class_name=sklearn, max_evals="many")
    server = fn.to_mock_server()
    try:
        answer = server.test("/v2/models/kernel/explain", body={"inputs": ROWS.tolist()})
        kernel = shap.KernelExplainer(joblib.load(ridge / "model.joblib").predict, BACKGROUND)
        np.random.seed(0)
        reference = kernel.shap_values(ROWS, nsamples=100, silent=True)
        assert answer["outputs"]["explainer"] == "kernel"
        np.testing.assert_allclose(answer["outputs"]["shap_values"], reference, rtol=0, atol=1e-6)
        for model, error in [
            ("unknown", "ValueError: explainer 'magic' is not one of"),
            ("evals", "ValueError: max_evals='many' is not a number"),
        ]:
            refused = server.test(
                f"/v2/models/{model}/explain", body={"inputs": ROWS.tolist()}, silent=True
            )
            assert refused.status_code == 500 and refused.body["error"].startswith(error)
            inferred = server.test(f"/v2/models/{model}/infer", body={"inputs": ROWS.tolist()})
            assert len(inferred["outputs"]) == len(ROWS)
    finally:
        server.wait_for_completion()
