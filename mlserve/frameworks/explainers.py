"""SHAP explanations of a model's answers (docs/frameworks.md#explanations).

``shap_explainer`` makes the explainer that suits a model: shap's exact
``TreeExplainer`` for tree ensembles (scikit-learn forests and boosting,
XGBoost), its ``LinearExplainer`` for linear models, and a model-agnostic one
(``Permutation``, or ``Kernel`` when asked) over a background sample for the
rest. Its ``explain(matrix)`` gives an ``Explanation``; its ``answer(request)``
gives the explain route's answer in the request's form (V2 tensors or mlrun
rows). The random explainers reseed numpy's generator before every call, under
one lock, so the same request gets the same values, equal to shap's own
called with the same seed.

The shap explainer is built on the first explain call, so a model that is
never explained never imports shap; without shap that call answers 501 naming
the extra (``pip install 'mlserve[explain]'``), and a missing background is a
400 that says how to give one. ``configured_explainer`` is what the framework
servers set in ``load()``, from the model's ``explainer`` / ``background`` /
``max_evals`` / ``feature_names`` parameters.
"""

from __future__ import annotations

import importlib
import json
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlserve.frameworks.common import feature_matrix
from mlserve.protocol.errors import InvalidInput, NotSupported
from mlserve.protocol.forms import InferenceRequest

__all__ = [
    "KINDS",
    "ExplainOutputs",
    "Explanation",
    "ShapExplainer",
    "shap_readable_booster",
    "configured_explainer",
    "explained_output",
    "explainer_kind",
    "load_background",
    "shap_explainer",
]

KINDS = ("auto", "tree", "linear", "permutation", "kernel")
SEED = 0  # every random explainer's seed: the same request gets the same values
BACKGROUND_FILES = ("background.npy", "background.csv")
DEFAULT_MAX_EVALS = 500  # shap's Permutation default; raised to 2 * features + 1 when too few
INSTALL = "pip install 'mlserve[explain]'"
FLOAT_DATATYPES = ("FP16", "BF16", "FP32", "FP64")

# scikit-learn estimators shap's TreeExplainer reads (class names, in sklearn.ensemble / .tree)
SKLEARN_TREES = frozenset(
    {
        "DecisionTreeClassifier",
        "DecisionTreeRegressor",
        "ExtraTreeClassifier",
        "ExtraTreeRegressor",
        "RandomForestClassifier",
        "RandomForestRegressor",
        "ExtraTreesClassifier",
        "ExtraTreesRegressor",
        "GradientBoostingClassifier",
        "GradientBoostingRegressor",
        "HistGradientBoostingClassifier",
        "HistGradientBoostingRegressor",
        "IsolationForest",
    }
)
XGBOOST_TREES = frozenset(
    {"Booster", "XGBClassifier", "XGBRegressor", "XGBRFClassifier", "XGBRFRegressor"}
)
# numpy's global generator is what shap's random explainers draw from
_RANDOM = threading.Lock()


@dataclass
class Explanation:
    """SHAP values of some rows: ``values`` is ``[rows, features]`` for one output or
    ``[rows, features, classes]``; ``base_values`` is ``[outputs]`` (the expected
    output, the same for every row) or ``[rows, outputs]`` when it differs per row."""

    values: np.ndarray
    base_values: np.ndarray
    feature_names: list[str]
    classes: list[str] = field(default_factory=list)
    explainer: str = ""

    def per_output(self) -> dict[str, np.ndarray]:
        """``{"shap_values": [rows, features]}``, or ``{class: [rows, features]}`` per class."""
        if self.values.ndim == 2:
            return {"shap_values": self.values}
        labels = self.classes or [str(i) for i in range(self.values.shape[2])]
        return {label: self.values[:, :, i] for i, label in enumerate(labels)}

    def parameters(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names),
            "explainer": self.explainer,
            "classes": list(self.classes),
        }

    def tensor_outputs(self) -> ExplainOutputs:
        """The V2 tensor answer: ``shap_values`` or ``shap_values_<class>`` ([rows,
        features], FP64), then ``base_values``; the names and explainer in ``parameters``."""
        if self.values.ndim == 2:
            outputs = ExplainOutputs(shap_values=_fp64(self.values))
        else:
            outputs = ExplainOutputs(
                {f"shap_values_{label}": _fp64(v) for label, v in self.per_output().items()}
            )
        outputs["base_values"] = _fp64(self.base_values)
        outputs.parameters = self.parameters()
        return outputs

    def rows_outputs(self) -> dict[str, Any]:
        """The rows-form (mlrun) answer."""
        values: Any = (
            self.values.tolist()
            if self.values.ndim == 2
            else {label: v.tolist() for label, v in self.per_output().items()}
        )
        return {
            "shap_values": values,
            "base_values": self.base_values.tolist(),
            "feature_names": list(self.feature_names),
            "explainer": self.explainer,
        }


class ExplainOutputs(dict[str, np.ndarray]):
    """Output tensors with the response ``parameters`` the model's envelope adds."""

    parameters: dict[str, Any]


Compute = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class ShapExplainer:
    """A shap explainer, built on its first use (shap imported then) and kept:
    ``kind`` is its name in answers ("tree", "linear", "permutation", "kernel")."""

    def __init__(
        self,
        build: Callable[[], tuple[Compute, int | None]],
        kind: str,
        feature_names: Sequence[str] | None = None,
        classes: Sequence[object] | None = None,
    ) -> None:
        self._build = build
        self._built: tuple[Compute, int | None] | None = None
        self._lock = threading.Lock()
        self.kind = kind
        self.feature_names = [str(n) for n in feature_names] if feature_names else None
        self.classes = [str(c) for c in classes] if classes is not None else []

    def built(self) -> tuple[Compute, int | None]:
        """The computation and the number of features it takes (None: any)."""
        if self._built is None:
            with self._lock:
                if self._built is None:
                    self._built = self._build()
        return self._built

    def explain(self, matrix: np.ndarray) -> Explanation:
        """The SHAP values of the rows of ``matrix`` ([rows, features])."""
        values, base = self.built()[0](matrix)
        values, base = np.asarray(values, dtype=np.float64), np.asarray(base, dtype=np.float64)
        if values.ndim == 3 and values.shape[2] == 1:  # a [rows, 1] output is one output
            values, base = values[:, :, 0], base.reshape(len(values), -1)[:, 0]
        base = _constant_base(base, len(values))
        outputs = values.shape[2] if values.ndim == 3 else 0
        classes = self.classes if len(self.classes) == outputs else []
        classes = classes or [str(i) for i in range(outputs)]  # no labels: the index
        names = self.feature_names or [f"f{i}" for i in range(values.shape[1])]
        return Explanation(values, base, names, classes, self.kind)

    def answer(self, request: Any, feature_names: Sequence[str] | None = None) -> Any:
        """The explain route's answer to a request: V2 tensors for a tensor request, the
        rows form for rows; ``feature_names`` (the serving model's) name the features
        when the explainer was given none."""
        names = self.feature_names or (list(feature_names) if feature_names else None)
        matrix = feature_matrix(request, self.built()[1], names)
        if matrix.dtype.kind not in "biuf":
            raise InvalidInput(f"explain takes numbers, got an input of {matrix.dtype} values")
        if not len(matrix):
            raise InvalidInput("explain takes at least one row")
        try:
            explanation = self.explain(matrix.astype(np.float64))
        except ValueError as exc:  # the model's own input checks (XGBoost's among them)
            first_line = str(exc).partition("\n")[0]  # XGBoost's goes on with a stack trace
            raise InvalidInput(f"the model rejected the input: {first_line}") from None
        if names and len(names) == explanation.values.shape[1]:
            explanation.feature_names = list(names)
        if isinstance(request, InferenceRequest):
            return explanation.tensor_outputs()
        return explanation.rows_outputs()


def shap_explainer(
    predict: Callable[[np.ndarray], Any] | None,
    background: Any = None,
    *,
    kind: str = "auto",
    model: object = None,
    max_evals: int | None = None,
    feature_names: Sequence[str] | None = None,
    classes: Sequence[object] | None = None,
    seed: int = SEED,
) -> ShapExplainer:
    """A SHAP explainer: ``tree`` and ``linear`` read ``model``; ``permutation`` and
    ``kernel`` call ``predict`` on ``[rows, features]`` arrays over a ``background``
    sample (rows); ``auto`` picks by the model's class. A ``V2ModelServer`` subclass sets
    ``self.explainer = shap_explainer(self.model.predict, background)`` in ``load()`` and
    its explain route answers with it."""
    data = None if background is None else _matrix(background, "background")
    return _explainer(predict, lambda: data, kind, model, max_evals, feature_names, classes, seed)


def _explainer(
    predict: Callable[[np.ndarray], Any] | None,
    background: Callable[[], np.ndarray | None],
    kind: str,
    model: object,
    max_evals: int | None,
    feature_names: Sequence[str] | None,
    classes: Sequence[object] | None,
    seed: int,
) -> ShapExplainer:
    if kind not in KINDS:
        raise ValueError(f"explainer {kind!r} is not one of {list(KINDS)}")
    if kind == "auto":
        kind = explainer_kind(model)
    if kind in ("tree", "linear") and model is None:
        raise ValueError(f"the {kind} explainer reads the model: give model")
    if kind in ("permutation", "kernel") and predict is None:
        raise ValueError(f"the {kind} explainer calls the model: give predict")

    def build() -> tuple[Compute, int | None]:
        shap = _shap()
        data = background()
        if kind == "tree":
            return _tree(shap, model, data)
        if data is None:
            raise InvalidInput(
                f"the {kind} explainer needs a background sample: give the model a "
                "'background' parameter (a list of rows) or a "
                f"{' or '.join(BACKGROUND_FILES)} file beside it"
            )
        if kind == "linear":
            return _linear(shap, model, data), data.shape[1]
        assert predict is not None
        evals = max(max_evals or DEFAULT_MAX_EVALS, 2 * data.shape[1] + 1)
        if kind == "kernel":
            return _kernel(shap, predict, data, evals, seed), data.shape[1]
        return _permutation(shap, predict, data, evals, seed), data.shape[1]

    return ShapExplainer(build, kind, feature_names or _own_feature_names(model), classes)


def _own_feature_names(model: Any) -> list[str] | None:
    """A model's feature names: scikit-learn's ``feature_names_in_``, XGBoost's."""
    names = getattr(model, "feature_names_in_", None)
    if names is None and type(model).__module__.startswith("xgboost"):
        booster = model.get_booster() if hasattr(model, "get_booster") else model
        names = booster.feature_names
    return [str(name) for name in names] if names is not None and len(names) else None


def explainer_kind(model: object) -> str:
    """``tree`` for a tree ensemble shap reads, ``linear`` for a scikit-learn linear
    model, else ``permutation``."""
    if model is None:
        return "permutation"
    cls = type(model)
    module, name = cls.__module__, cls.__name__
    if module.startswith(("sklearn.ensemble", "sklearn.tree")) and name in SKLEARN_TREES:
        # shap 0.48 reads a GradientBoostingClassifier of two classes only
        several = len(getattr(model, "classes_", ())) > 2
        return "permutation" if name == "GradientBoostingClassifier" and several else "tree"
    if module.startswith("xgboost") and name in XGBOOST_TREES:
        return "tree"
    if module.startswith("sklearn.linear_model") and hasattr(model, "coef_"):
        return "linear"
    return "permutation"


def explained_output(outputs: Sequence[dict[str, Any]], asked: object = None) -> str:
    """The output a model-agnostic explainer explains: ``asked`` (the model's
    ``explain_output`` parameter), else the first floating-point one (a classifier's
    probabilities, not its labels), else the first."""
    names = [str(output["name"]) for output in outputs]
    if asked:
        if str(asked) not in names:
            raise InvalidInput(f"explain_output {asked!r} is not one of the outputs {names}")
        return str(asked)
    for output in outputs:
        if output.get("datatype") in FLOAT_DATATYPES:
            return str(output["name"])
    if not names:
        raise InvalidInput("the model declares no output to explain")
    return names[0]


def load_background(given: Any, folder: Path | None) -> np.ndarray | None:
    """The background sample: the ``background`` parameter (rows, or a file name in the
    model's folder), else ``background.npy`` / ``background.csv`` beside the model."""
    if isinstance(given, str):
        path = Path(given).expanduser()
        return _read_background(path if path.is_absolute() or folder is None else folder / path)
    if given is not None:
        return _matrix(given, "background")
    for name in BACKGROUND_FILES if folder is not None else ():
        assert folder is not None
        if (folder / name).is_file():
            return _read_background(folder / name)
    return None


def configured_explainer(
    server: Any,
    predict: Callable[[np.ndarray], Any],
    *,
    model: object = None,
    folder: Path | None = None,
    feature_names: Sequence[str] | None = None,
    classes: Sequence[object] | None = None,
) -> ShapExplainer:
    """A framework server's explainer from its parameters: ``explainer`` (one of
    ``KINDS``, default auto), ``background`` (rows, or a file name in ``folder``;
    default a background file there, read on the first explain call), ``max_evals``
    and ``feature_names``. A wrong one fails the explain calls with its name, not the
    model's load: inference goes on."""
    given = server.get_param("background", None)
    max_evals = server.get_param("max_evals", None)
    kind = str(server.get_param("explainer", "auto") or "auto")
    try:
        try:
            evals = int(max_evals) if max_evals else None
        except (TypeError, ValueError):
            raise ValueError(f"max_evals={max_evals!r} is not a number") from None
        names = server.get_param("feature_names", None) or feature_names
        return _explainer(
            predict,
            lambda: load_background(given, folder),
            kind,
            model,
            evals,
            names,
            classes,
            SEED,
        )
    except ValueError as exc:
        problem = str(exc)

    def misconfigured() -> tuple[Compute, int | None]:
        raise ValueError(problem)

    return ShapExplainer(misconfigured, kind)


# ---- internals -------------------------------------------------------------------


def _shap() -> Any:
    try:
        return importlib.import_module("shap")
    except ImportError:
        raise NotSupported(f"explaining needs shap, which is not installed: {INSTALL}") from None


def _fp64(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float64)


def _matrix(rows: Any, what: str) -> np.ndarray:
    try:
        matrix = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"the {what} must be rows of numbers: {exc}") from None
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or not matrix.size:
        raise InvalidInput(f"the {what} must be a non-empty [rows, features] table")
    return matrix


def _read_background(path: Path) -> np.ndarray:
    if not path.is_file():
        raise InvalidInput(f"the background file {path.name} does not exist")
    if path.suffix == ".npy":
        return _matrix(np.load(path, allow_pickle=False), "background")
    try:
        return _matrix(np.loadtxt(path, delimiter=",", ndmin=2), "background")
    except ValueError:  # a header line of feature names
        return _matrix(np.loadtxt(path, delimiter=",", ndmin=2, skiprows=1), "background")


def _constant_base(base: np.ndarray, rows: int) -> np.ndarray:
    """``[outputs]`` when every row has the same base value (the usual case), else as is."""
    if base.ndim == 0:
        return base.reshape(1)
    if base.ndim == 1 and len(base) == rows:
        base = base.reshape(rows, 1)
    if base.ndim == 2 and np.all(base == base[:1]):
        return base[0].copy()
    return base


def _tree(shap: Any, model: Any, data: np.ndarray | None) -> tuple[Compute, int | None]:
    """TreeExplainer: path-dependent without a background, interventional with one."""
    offset: np.ndarray | None = None
    if type(model).__module__.startswith("xgboost"):
        model, offset = shap_readable_booster(model)
        if data is None:  # path-dependent: shap asks XGBoost's own contributions (its real base)
            offset = None
    tree = shap.TreeExplainer(model, data)
    n_features = getattr(model, "n_features_in_", None)
    if n_features is None and hasattr(model, "num_features"):
        n_features = int(model.num_features())

    def tree_values(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # shap_values, not tree(matrix): the same values and base without the Explanation
        # (and its slicer) that __call__ builds around them, a fifth of a one-row call
        values = tree.shap_values(matrix)
        expected = np.asarray(tree.expected_value, dtype=np.float64)
        base = np.broadcast_to(expected, (len(matrix), *expected.shape))
        return values, base if offset is None else base + offset

    return tree_values, n_features


def _linear(shap: Any, model: object, data: np.ndarray) -> Compute:
    linear = shap.LinearExplainer(model, data)

    def linear_values(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        result = linear(matrix)
        return result.values, result.base_values

    return linear_values


def _kernel(
    shap: Any, predict: Callable[[np.ndarray], Any], data: np.ndarray, evals: int, seed: int
) -> Compute:
    kernel = shap.KernelExplainer(predict, data)

    def kernel_values(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with _RANDOM:
            np.random.seed(seed)
            values = kernel.shap_values(matrix, nsamples=evals, silent=True)
        expected = np.asarray(kernel.expected_value, dtype=np.float64)
        return np.asarray(values), np.broadcast_to(expected, (len(matrix), *expected.shape))

    return kernel_values


def _permutation(
    shap: Any, predict: Callable[[np.ndarray], Any], data: np.ndarray, evals: int, seed: int
) -> Compute:
    permutation = shap.explainers.Permutation(predict, data, seed=seed)

    def permutation_values(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with _RANDOM:
            np.random.seed(seed)
            result = permutation(matrix, max_evals=evals, silent=True)
        return result.values, result.base_values

    return permutation_values


def shap_readable_booster(model: Any) -> tuple[Any, np.ndarray | None]:
    """An XGBoost model as shap 0.48 reads it, and what to add to base values shap
    computes from the trees it reads (with a background; path-dependent values come
    from XGBoost's own contributions, base included).

    XGBoost 3 saves ``base_score`` as a list (``'[5E-1]'``, one value per output), which
    shap 0.48's loader cannot parse (shap issue #4184). shap reads the model through
    ``save_raw("ubj")``, so it gets a copy of the booster whose saved ``base_score`` is a
    number: the value itself when there is one, else the objective's neutral value (0 in
    margin space), the per-output margins then added to the base values.
    """
    import xgboost as xgb

    booster = model.get_booster() if hasattr(model, "get_booster") else model
    config = json.loads(booster.save_config())["learner"]
    text = str(config["learner_model_param"]["base_score"])
    if not text.startswith("["):
        return model, None
    values = text.strip("[]").split(",")
    objective = str(config["objective"]["name"])
    offset: np.ndarray | None = None
    if len(values) == 1:
        number = values[0]  # as XGBoost wrote it
    else:
        number = repr(_NEUTRAL.get(objective, 0.0))
        offset = _margin(np.asarray(values, dtype=np.float64), objective)
    raw = _with_base_score(bytes(booster.save_raw(raw_format="ubj")), number.encode())

    class ShapReadableBooster(xgb.Booster):
        def save_raw(self, raw_format: str = "ubj") -> bytearray:
            if raw_format == "ubj":
                return bytearray(raw)
            return super().save_raw(raw_format=raw_format)

    # the model's own bytes, its attributes (best_iteration) included
    return ShapReadableBooster(model_file=bytearray(booster.save_raw(raw_format="ubj"))), offset


# shap's loader maps base_score to margin space by the objective: logit, log, or as is
_LOGISTIC = ("binary:logistic", "reg:logistic")
_EXP = ("reg:gamma", "reg:tweedie", "count:poisson", "survival:cox", "survival:aft")
_NEUTRAL = {**dict.fromkeys(_LOGISTIC, 0.5), **dict.fromkeys(_EXP, 1.0)}


def _margin(scores: np.ndarray, objective: str) -> np.ndarray:
    if objective in _LOGISTIC:
        return np.asarray(np.log(scores / (1 - scores)))
    if objective in _EXP:
        return np.asarray(np.log(scores))
    return scores


_UBJ_INTS = {b"i": ">b", b"U": ">B", b"I": ">h", b"l": ">i", b"L": ">q"}


def _with_base_score(raw: bytes, number: bytes) -> bytes:
    """A UBJSON model whose ``base_score`` string is ``number`` (lengths are typed ints)."""
    key = raw.find(b"base_score", raw.find(b"learner_model_param"))  # not a feature's name
    if key < 0 or raw[key + 10 : key + 11] != b"S":
        raise ValueError("the XGBoost model has no base_score string to rewrite")
    at = key + 11
    fmt = _UBJ_INTS[raw[at : at + 1]]
    size = struct.calcsize(fmt)
    (length,) = struct.unpack(fmt, raw[at + 1 : at + 1 + size])
    end = at + 1 + size + length
    return raw[: key + 11] + b"L" + struct.pack(">q", len(number)) + number + raw[end:]
