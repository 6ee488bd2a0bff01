"""Feature statistics in mlrun's format, the reference and the window side of drift
(docs/monitoring.md#reference-statistics).

A model's training set is described once (``feature_stats``, usually saved as
``feature_stats.json`` beside the model); each monitored window is described the same
way with its histograms counted on the reference's edges (``inputs_statistics``), so the
two histograms compare bin by bin. The numbers are those of mlrun 1.12's
``get_df_stats`` and ``calculate_inputs_statistics``, so a reference logged by mlrun
works here unchanged.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FEATURE_STATS_FILE",
    "feature_stats",
    "inputs_statistics",
    "load_feature_stats",
    "pad_features_hist",
]

FEATURE_STATS_FILE = "feature_stats.json"
_MAX_FLOAT = sys.float_info.max


def _frame(data: Any, names: Sequence[str] | None) -> pd.DataFrame:
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        if names is not None:
            raise ValueError("feature_stats: names are for an array; a DataFrame has its columns")
        return data
    frame = pd.DataFrame(data, columns=None if names is None else list(names))
    if names is None:  # JSON keys are strings: "0", "1", ... rather than pandas' ints
        frame.columns = [str(column) for column in frame.columns]
    return frame


def _plain(value: Any) -> Any:
    """A ``describe()`` cell as JSON-ready Python, converted as mlrun converts it."""
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, bool):  # before int: a bool is an int
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    return str(value)


def _describe(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each column's ``describe(include="all")`` values, NaN cells left out."""
    return {
        column: {stat: _plain(value) for stat, value in values.dropna().items()}
        for column, values in frame.describe(include="all").items()
    }


def _histogram(values: Any, bins: Any) -> list[list[Any]] | None:
    """``[counts, edges]``, or None where numpy cannot count (NaN-only, strings)."""
    if getattr(getattr(values, "dtype", None), "kind", "") == "b":  # numpy would warn: uint8
        values = np.asarray(values, dtype=np.uint8)
    try:
        counts, edges = np.histogram(values, bins=bins)
    except (TypeError, ValueError):
        return None
    return [counts.tolist(), edges.tolist()]


def feature_stats(
    data: Any, names: Sequence[str] | None = None, bins: int = 20
) -> dict[str, dict[str, Any]]:
    """Per column statistics of ``data`` (a DataFrame, or rows with ``names``; unnamed
    columns are ``"0"``, ``"1"``, ...): mlrun's ``get_df_stats`` with histograms of
    ``bins`` bins for the numeric columns. An empty frame gives ``{}``."""
    import pandas as pd

    frame = _frame(data, names)
    if frame.empty:
        return {}
    stats = _describe(frame)
    for column, column_stats in stats.items():
        if pd.api.types.is_numeric_dtype(frame[column]):
            hist = _histogram(frame[column], bins)
            if hist is not None:
                column_stats["hist"] = hist
    return stats


def pad_features_hist(stats: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A copy of ``stats`` whose histograms have an empty bin on each side reaching
    -/+ the largest float, so that every finite value of a window falls in a bin
    (mlrun's ``pad_features_hist``; a padded histogram is kept as it is)."""
    padded = copy.deepcopy(stats)
    for column_stats in padded.values():
        hist = column_stats.get("hist")
        if hist is None:
            continue
        counts, edges = hist[0], hist[1]
        if edges[0] == -_MAX_FLOAT and edges[-1] == _MAX_FLOAT:
            continue
        counts.insert(0, 0)
        edges.insert(0, -_MAX_FLOAT)
        counts.append(0)
        edges.append(_MAX_FLOAT)
    return padded


def inputs_statistics(
    reference: dict[str, dict[str, Any]], frame: pd.DataFrame
) -> dict[str, dict[str, Any]]:
    """The statistics of a window's inputs, each histogram counted on the edges of the
    reference's (mlrun's ``calculate_inputs_statistics``). Columns the reference lacks
    are left out. Where mlrun would raise (a reference feature without a histogram, a
    window column numpy cannot count), the feature keeps its statistics without a
    histogram, and drift skips it."""
    shared = frame[[column for column in frame.columns if column in reference]]
    if shared.empty:
        return {}
    stats = _describe(shared)
    for column, column_stats in stats.items():
        reference_hist = reference[column].get("hist")
        if reference_hist is None:
            continue
        hist = _histogram(frame[column].to_numpy(), reference_hist[1])
        if hist is not None:
            column_stats["hist"] = hist
    return stats


def load_feature_stats(model_path: str | Path) -> dict[str, dict[str, Any]] | None:
    """The reference statistics saved as ``feature_stats.json`` beside a model file, or
    inside a model directory; None when there is none."""
    path = Path(model_path)
    file = (path if path.is_dir() else path.parent) / FEATURE_STATS_FILE
    if not file.is_file():
        return None
    try:
        stats = json.loads(file.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: not valid JSON ({exc})") from None
    if not isinstance(stats, dict) or not all(isinstance(v, dict) for v in stats.values()):
        raise ValueError(
            f"{file}: expected an object of feature name to statistics object "
            '(mlrun\'s feature_stats, e.g. {"x": {"count": 3.0, "mean": 1.5, "hist": ...}})'
        )
    return stats
