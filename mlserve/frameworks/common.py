"""What the scikit-learn, XGBoost and ONNX Runtime servers share.

- ``require``: a framework is imported only when a model of it loads, and its
  absence names the extra that installs it;
- ``model_file``: ``model_path`` is the model file, or a version folder where
  the file has one of the framework's names (never a path from a request);
- ``check_request``: the servers' ``validate``: a tensor request or rows in
  ``inputs``; the tensors are checked where they are read, so any numeric
  type goes (the model casts);
- ``requested_outputs``: the V2 ``outputs`` a request asks for, checked
  against what the model can compute, so only those are computed;
- ``feature_matrix``: the 2-D feature array of a tabular model, from one
  ``[rows, features]`` tensor, from one tensor per feature name, or from
  rows-form ``inputs``;
- ``rows_answer``: a rows-form (mlrun style) answer: one output as a list,
  several as ``{name: list}``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.forms import InferenceRequest

__all__ = [
    "check_request",
    "feature_matrix",
    "model_file",
    "require",
    "requested_outputs",
    "rows_answer",
]


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; when it is missing, say which mlserve extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is needed to serve this model but is not installed: "
            f"pip install 'mlserve[{extra}]'"
        ) from exc


def model_file(model_path: str | None, names: Sequence[str]) -> Path:
    """The model file: ``model_path`` itself, or the first of ``names`` in that folder."""
    if not model_path:
        raise ValueError(f"no model_path: give a model file or a folder holding one of {names}")
    path = Path(model_path).expanduser()
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"model_path {model_path} does not exist")
    for name in names:
        if (path / name).is_file():
            return path / name
    raise FileNotFoundError(f"{model_path} holds none of the model files {list(names)}")


def check_request(request: object) -> dict[str, Any]:
    """A tensor-form request, or a rows-form one whose ``inputs`` is a list."""
    if isinstance(request, InferenceRequest):
        return request
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise InvalidInput('Expected key "inputs" (a list) in request body')
    return request


def requested_outputs(
    request: object, available: Sequence[str], default: Sequence[str]
) -> list[str]:
    """The output names a request asks for (``default`` when none); an unknown one is a 400."""
    asked = request.get("outputs") if isinstance(request, dict) else None
    if not asked:
        return list(default)
    if not isinstance(asked, list) or not all(isinstance(o, dict) and "name" in o for o in asked):
        raise InvalidInput("'outputs' must be a list of objects with a 'name'")
    names = [str(o["name"]) for o in asked]
    unknown = [name for name in names if name not in available]
    if unknown:
        raise InvalidInput(
            f"unknown requested output(s) {unknown}, the model outputs {list(available)}"
        )
    return names


def feature_matrix(
    request: Any, n_features: int | None, feature_names: Sequence[str] | None = None
) -> np.ndarray:
    """The ``[rows, features]`` array of a request for a tabular model."""
    if isinstance(request, InferenceRequest):
        tensors = request.tensors
        if len(tensors) == 1:
            matrix = next(iter(tensors.values()))
        else:
            matrix = _columns(tensors, feature_names)
    else:
        matrix = _rows(request["inputs"], feature_names)
    if matrix.ndim == 1 and n_features == 1:
        matrix = matrix.reshape(-1, 1)
    if matrix.ndim != 2:
        raise InvalidInput(
            f"the model takes a 2-D [rows, features] input, got shape {list(matrix.shape)}"
        )
    if n_features is not None and matrix.shape[1] != n_features:
        raise InvalidInput(
            f"the model takes {n_features} features per row, got {matrix.shape[1]} "
            f"(input shape {list(matrix.shape)})"
        )
    if matrix.dtype == object or matrix.dtype.kind in "SU":
        try:
            matrix = matrix.astype(np.float64)
        except ValueError:
            pass  # text features: the model's own pipeline may encode them
    return matrix


def _rows(rows: list[Any], feature_names: Sequence[str] | None) -> np.ndarray:
    """Rows-form ``inputs``: lists of feature values, or ``{feature name: value}`` objects."""
    if rows and all(isinstance(row, dict) for row in rows):
        if not feature_names:
            raise InvalidInput("the model has no feature names: send rows as lists of values")
        missing = sorted({name for row in rows for name in feature_names if name not in row})
        if missing:
            raise InvalidInput(f"rows are missing the feature(s) {missing}")
        rows = [[row[name] for name in feature_names] for row in rows]
    try:
        return np.asarray(rows)
    except ValueError as exc:  # ragged rows
        raise InvalidInput(f"'inputs' must be rows of equal length: {exc}") from None


def _columns(tensors: dict[str, np.ndarray], feature_names: Sequence[str] | None) -> np.ndarray:
    """One tensor per feature (``[rows]`` or ``[rows, 1]``), stacked in the model's order."""
    if not feature_names:
        raise InvalidInput(
            f"the model has no feature names: send one [rows, features] tensor, "
            f"not {sorted(tensors)}"
        )
    missing = [name for name in feature_names if name not in tensors]
    unknown = sorted(set(tensors) - set(feature_names))
    if missing or unknown:
        raise InvalidInput(
            f"the model's features are {list(feature_names)}; missing {missing}, unknown {unknown}"
        )
    columns = []
    for name in feature_names:
        column = tensors[name]
        if column.ndim == 2 and column.shape[1] == 1:
            column = column[:, 0]
        if column.ndim != 1:
            raise InvalidInput(
                f"feature '{name}' must have shape [rows] or [rows, 1], got {list(column.shape)}"
            )
        columns.append(column)
    if len({len(column) for column in columns}) != 1:
        raise InvalidInput("every feature tensor must have the same number of rows")
    return np.column_stack(columns)


def rows_answer(outputs: dict[str, np.ndarray]) -> Any:
    """A rows-form answer: one output as a list, several as ``{name: list}``."""
    if len(outputs) == 1:
        return next(iter(outputs.values())).tolist()
    return {name: value.tolist() for name, value in outputs.items()}
