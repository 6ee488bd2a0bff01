"""Drift of a window's inputs from the reference, as mlrun 1.12's histogram data-drift
application measures it (docs/monitoring.md#how-drift-is-measured).

Each feature's histograms (reference and window, on the same padded edges) are turned
into probabilities, and three distances are taken: total variance (TVD), Hellinger and
the symmetric Kullback-Leibler divergence. Each is averaged over the features, and the
mean of the TVD and Hellinger averages is the general drift, classified by two
thresholds. The values equal mlrun's; a KL divergence may be ``inf`` (a bin empty on one
side only, beyond ``zero_scaling``): records are written with
``mlserve.protocol.tensors.dumps_strict``, which writes it as null.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

import numpy as np

__all__ = [
    "DriftThresholds",
    "ResultKindApp",
    "ResultStatusApp",
    "drift_measures",
    "hellinger",
    "kld",
    "tvd",
]

METRICS = ("hellinger", "kld", "tvd")


class ResultKindApp(Enum):
    """What a monitoring application's result is about (mlrun's values)."""

    data_drift = 0
    concept_drift = 1
    model_performance = 2
    system_performance = 3
    mm_app_anomaly = 4


class ResultStatusApp(IntEnum):
    """How bad a result is: ``detected`` means a problem (mlrun's values)."""

    irrelevant = -1
    no_detection = 0
    potential_detection = 1
    detected = 2


def tvd(t: np.ndarray, u: np.ndarray) -> float:
    """Total variance distance of two distributions: half the sum of the differences."""
    return float(np.sum(np.abs(t - u)) / 2)


def hellinger(t: np.ndarray, u: np.ndarray) -> float:
    """Hellinger distance, in [0, 1] (rounding below 0 is clipped, a NaN stays NaN)."""
    return float(np.sqrt(max(1 - np.sum(np.sqrt(u * t)), 0)))


def _kl(actual: np.ndarray, expected: np.ndarray, zero_scaling: float) -> Any:
    """One-way KL divergence; 0 log 0 is 0, and an empty expected bin counts as
    ``zero_scaling``."""
    mask = actual != 0
    actual, expected = actual[mask], expected[mask]
    with np.errstate(over="ignore"):
        relative = actual / np.where(expected != 0, expected, zero_scaling)
    return np.sum(actual * np.log(relative))


def kld(t: np.ndarray, u: np.ndarray, zero_scaling: float = 1e-4) -> float:
    """Symmetric Kullback-Leibler divergence (both directions summed), uncapped."""
    return float(_kl(t, u, zero_scaling) + _kl(u, t, zero_scaling))


@dataclass(frozen=True)
class DriftThresholds:
    """The general drift at or above which drift is possible, and detected."""

    potential: float = 0.5
    detected: float = 0.7

    def __post_init__(self) -> None:
        if not 0 < self.potential < self.detected < 1:
            raise ValueError(
                "drift thresholds must satisfy 0 < potential < detected < 1, got "
                f"potential={self.potential}, detected={self.detected}"
            )

    def app_status(self, value: float) -> ResultStatusApp:
        if value >= self.detected:
            return ResultStatusApp.detected
        if value >= self.potential:
            return ResultStatusApp.potential_detection
        return ResultStatusApp.no_detection  # NaN too, as in mlrun

    def status(self, value: float) -> str:
        """The endpoint's drift status: ``NO_DRIFT``, ``POSSIBLE_DRIFT`` or
        ``DRIFT_DETECTED``."""
        return _STATUS_NAMES[self.app_status(value)]


_STATUS_NAMES = {
    ResultStatusApp.no_detection: "NO_DRIFT",
    ResultStatusApp.potential_detection: "POSSIBLE_DRIFT",
    ResultStatusApp.detected: "DRIFT_DETECTED",
}


def _distribution(stats: dict[str, Any]) -> np.ndarray:
    """A histogram's counts over the feature's count (mlrun's ``dict_to_histogram``)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # count 0: NaN, as in mlrun
        return np.asarray(stats["hist"][0]) / stats["count"]


def _mean(values: list[float]) -> float:
    """The mean without the NaN values (pandas' ``mean``); NaN when none is left."""
    kept = [value for value in values if not math.isnan(value)]
    return float(np.mean(kept)) if kept else math.nan


def drift_measures(
    reference: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per feature ``{"tvd", "hellinger", "kld"}`` of the window (``current``, from
    ``inputs_statistics``) against the padded ``reference``, for the features both
    have a histogram of, plus ``tvd_mean``, ``hellinger_mean``, ``kld_mean`` and
    ``general_drift`` (NaN without a shared feature)."""
    measures: dict[str, Any] = {}
    for feature, reference_stats in reference.items():
        current_stats = current.get(feature)
        if "hist" not in reference_stats or current_stats is None or "hist" not in current_stats:
            continue
        t, u = _distribution(current_stats), _distribution(reference_stats)
        measures[feature] = {"tvd": tvd(t, u), "hellinger": hellinger(t, u), "kld": kld(t, u)}
    per_feature = list(measures.values())
    for metric in METRICS:
        measures[f"{metric}_mean"] = _mean([values[metric] for values in per_feature])
    measures["general_drift"] = float(np.mean([measures["hellinger_mean"], measures["tvd_mean"]]))
    return measures
