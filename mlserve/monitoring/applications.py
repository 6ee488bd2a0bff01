"""Monitoring applications: mlrun's interface for code that judges one endpoint's window
(docs/monitoring.md#monitoring-applications).

The monitor builds a ``MonitoringApplicationContext`` (the endpoint, the window's inputs
as a DataFrame, the reference statistics) for each application and window, and calls its
``do_tracking``; the results and metrics it returns go to the endpoint's record. An
application written for mlrun (``ModelMonitoringApplicationBase``, ``ResultKindApp``,
``ResultStatusApp``, ``logger.info("msg", key=value)``) runs here unchanged, as long as
it uses only the context's data (no artifacts, no mlrun project).
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from mlserve.monitoring.drift import (
    DriftThresholds,
    ResultKindApp,
    ResultStatusApp,
    drift_measures,
)
from mlserve.monitoring.endpoints import ModelEndpoint
from mlserve.monitoring.statistics import inputs_statistics, pad_features_hist

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "HistogramDataDriftApplication",
    "ModelMonitoringApplicationBase",
    "ModelMonitoringApplicationMetric",
    "ModelMonitoringApplicationResult",
    "MonitoringApplication",
    "MonitoringApplicationContext",
    "ResultKindApp",
    "ResultStatusApp",
    "run_applications",
]

logger = logging.getLogger("mlserve.monitoring")

_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"monitoring result or metric name {name!r} must match {_NAME.pattern} "
            "(a letter or underscore, then letters, digits, underscores)"
        )


@dataclass
class ModelMonitoringApplicationResult:
    """A judged value: its kind and status tell the monitor and the alerts what it means.
    ``extra_data`` carries any JSON-ready details."""

    name: str
    value: float
    kind: ResultKindApp
    status: ResultStatusApp
    extra_data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_name(self.name)

    def to_dict(self) -> dict[str, Any]:
        """mlrun's keys; ``extra_data`` stays a dict (mlrun writes it as a JSON string)."""
        return {
            "result_name": self.name,
            "result_value": self.value,
            "result_kind": self.kind.value,
            "result_status": self.status.value,
            "result_extra_data": self.extra_data,
        }


@dataclass
class ModelMonitoringApplicationMetric:
    """A plain measured value, without a status."""

    name: str
    value: float

    def __post_init__(self) -> None:
        _check_name(self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"metric_name": self.name, "metric_value": self.value}


Output = ModelMonitoringApplicationResult | ModelMonitoringApplicationMetric


class _KeywordsAdapter(logging.LoggerAdapter[logging.Logger]):
    """A logger that takes mlrun's ``logger.info("msg", key=value)``: the keywords that
    are not ``logging``'s own are appended to the message."""

    _OWN = frozenset({"exc_info", "stack_info", "stacklevel", "extra"})

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        fields = {key: kwargs.pop(key) for key in list(kwargs) if key not in self._OWN}
        if fields:
            msg = f"{msg} " + " ".join(f"{key}={value!r}" for key, value in fields.items())
        return msg, kwargs


class MonitoringApplicationContext:
    """What an application sees of one endpoint's window. The reference (padded) and
    the window's statistics are computed on first use, once."""

    def __init__(
        self,
        application_name: str,
        endpoint: ModelEndpoint,
        sample_df: pd.DataFrame,
        start_infer_time: datetime,
        end_infer_time: datetime,
        logger: logging.Logger | None = None,
    ) -> None:
        self._application_name = application_name
        self._endpoint = endpoint
        self._sample_df = sample_df
        self._start = start_infer_time
        self._end = end_infer_time
        self._logger = _KeywordsAdapter(
            logger or logging.getLogger(f"mlserve.monitoring.{application_name}")
        )
        self._feature_stats: dict[str, dict[str, Any]] | None = None
        self._sample_df_stats: dict[str, dict[str, Any]] | None = None

    @property
    def application_name(self) -> str:
        return self._application_name

    @property
    def model_endpoint(self) -> ModelEndpoint:
        return self._endpoint

    @property
    def endpoint_id(self) -> str:
        return self._endpoint.metadata.uid

    @property
    def sample_df(self) -> pd.DataFrame:
        """The window's inputs, a row per input row, a column per feature."""
        return self._sample_df

    @property
    def start_infer_time(self) -> datetime:
        return self._start

    @property
    def end_infer_time(self) -> datetime:
        return self._end

    @property
    def feature_names(self) -> list[str]:
        return self._endpoint.spec.feature_names

    @property
    def label_names(self) -> list[str]:
        return self._endpoint.spec.label_names

    @property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        return self._logger

    @property
    def feature_stats(self) -> dict[str, dict[str, Any]]:
        """The endpoint's reference statistics, histograms padded; ``{}`` without one."""
        if self._feature_stats is None:
            self._feature_stats = pad_features_hist(self._endpoint.spec.feature_stats)
        return self._feature_stats

    @property
    def sample_df_stats(self) -> dict[str, dict[str, Any]]:
        """The window's statistics, histograms on the reference's edges."""
        if self._sample_df_stats is None:
            self._sample_df_stats = inputs_statistics(self.feature_stats, self._sample_df)
        return self._sample_df_stats

    @staticmethod
    def dict_to_histogram(histogram_dict: dict[str, dict[str, Any]]) -> pd.DataFrame:
        """A column per feature with a histogram: its counts over its count."""
        import pandas as pd

        return pd.DataFrame(
            {
                feature: np.array(stats["hist"][0]) / stats["count"]
                for feature, stats in histogram_dict.items()
                if "hist" in stats
            }
        )


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


class MonitoringApplication(ABC):
    """Subclass and write ``do_tracking``. ``NAME`` (default: the first subclass's name
    in snake_case, inherited by its subclasses) keys the application's results."""

    NAME: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "NAME"):
            cls.NAME = _snake(cls.__name__)

    @abstractmethod
    def do_tracking(
        self, monitoring_context: MonitoringApplicationContext
    ) -> Output | list[Output]:
        """Judge the context's window; return results and metrics."""


ModelMonitoringApplicationBase = MonitoringApplication
"""mlrun's name of the base class."""


class HistogramDataDriftApplication(MonitoringApplication):
    """mlrun's default application: TVD, Hellinger and KL divergence per feature,
    averaged (metrics), and the general drift (the result, classified by thresholds).
    A subclass keeps the name, as mlrun asks."""

    NAME: ClassVar[str] = "histogram-data-drift"

    def __init__(self, thresholds: DriftThresholds | None = None) -> None:
        self.thresholds = thresholds or DriftThresholds()

    def do_tracking(self, monitoring_context: MonitoringApplicationContext) -> list[Output]:
        """Nothing without a reference; else the three means and ``general_drift``, whose
        ``extra_data`` holds ``current_stats``, ``drift_measures`` and ``drift_status``."""
        reference = monitoring_context.feature_stats
        if not reference:
            monitoring_context.logger.warning(
                "no reference statistics (feature_stats) for this endpoint: drift not measured"
            )
            return []
        current = monitoring_context.sample_df_stats
        measures = drift_measures(reference, current)
        metrics: list[Output] = [
            ModelMonitoringApplicationMetric(f"{name}_mean", measures[f"{name}_mean"])
            for name in ("hellinger", "kld", "tvd")
        ]
        value = measures["general_drift"]
        result = ModelMonitoringApplicationResult(
            name="general_drift",
            value=value,
            kind=ResultKindApp.data_drift,
            status=self.thresholds.app_status(value),
            extra_data={
                "current_stats": current,
                "drift_measures": measures,
                "drift_status": self.thresholds.status(value),
            },
        )
        return [*metrics, result]


def run_applications(
    applications: Iterable[MonitoringApplication],
    context_factory: Callable[[MonitoringApplication], MonitoringApplicationContext],
) -> tuple[dict[str, list[Output]], list[str]]:
    """Run each application on its context (``context_factory(application)``, which
    names it with ``application.NAME``).

    Returns ``(outputs, failed)``: each application's results and metrics as a list, by
    name, and the names of those that raised or returned something else; a failure is
    logged once, with its traceback, and the others go on. Two applications may not
    share a name (ValueError before any runs).
    """
    applications = list(applications)
    names = [application.NAME for application in applications]
    if len(set(names)) != len(names):
        raise ValueError(f"monitoring applications need distinct names, got {names}")
    outputs: dict[str, list[Output]] = {}
    failed: list[str] = []
    for application in applications:
        try:
            returned = application.do_tracking(context_factory(application))
            items = returned if isinstance(returned, list) else [returned]
            wrong = [type(item).__name__ for item in items if not isinstance(item, Output)]
            if wrong:
                raise TypeError(
                    "do_tracking must return ModelMonitoringApplicationResult or "
                    f"ModelMonitoringApplicationMetric objects (or a list of them), got {wrong}"
                )
        except Exception:
            logger.exception("monitoring application %s failed on this window", application.NAME)
            failed.append(application.NAME)
            continue
        outputs[application.NAME] = items
    return outputs, failed
