"""mlrun 1.12.1's own drift code, the oracle of test_drift_exact.py.

The functions are read from mlrun's wheel (``make install`` downloads it to
``.venv/reference``; mlrun's dependencies are not installed): each named function or
class is cut out of its module with ``ast`` and executed in a namespace holding what it
uses, the real mlrun pieces where they are pure (``InferOptions``, the result enums, the
distance metrics) and small stand-ins where mlrun reaches its platform (the results
classes, the logger, the application context).
"""

from __future__ import annotations

import abc
import ast
import copy
import dataclasses
import sys
import typing
import zipfile
from enum import Enum, IntEnum
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import packaging.version
import pandas as pd
import pytest

WHEEL = Path(__file__).parents[2] / ".venv" / "reference" / "mlrun-1.12.1-py3-none-any.whl"


def _source(wheel: zipfile.ZipFile, module: str, *names: str, within: str = "") -> str:
    """The source of the top-level definitions ``names`` of ``module`` (a path in the
    wheel), or of the methods ``names`` of its class ``within``."""
    text = wheel.read(module).decode()
    body = ast.parse(text).body
    if within:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == within).body
    found: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            name = node.name
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        else:
            continue
        if name in names:
            if isinstance(node, ast.FunctionDef):  # a method becomes a plain function
                node.decorator_list = []
            found[name] = ast.unparse(node)
    missing = set(names) - set(found)
    assert not missing, f"{module}: {missing} not found in mlrun's source"
    return "\n\n".join(found[name] for name in names)


def _module(name: str) -> dict[str, Any]:
    """A fresh module's namespace; dataclasses look their class's module up in sys.modules."""
    module = sys.modules[name] = ModuleType(name)
    return module.__dict__


def _run(source: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(source, f"<mlrun {namespace['__name__']}>", "exec"), namespace)
    return namespace


@dataclasses.dataclass
class _Metric:
    """Stand-in of mlrun's ``ModelMonitoringApplicationMetric`` (a pydantic dataclass)."""

    name: str
    value: float


@dataclasses.dataclass
class _Result:
    """Stand-in of mlrun's ``ModelMonitoringApplicationResult``."""

    name: str
    value: float
    kind: Any
    status: Any
    extra_data: dict[str, Any] = dataclasses.field(default_factory=dict)


class _Logger:
    """mlrun's logger takes keywords; these messages are not checked."""

    def info(self, *args: Any, **kwargs: Any) -> None:
        pass

    debug = warning = info


@cache
def _mlrun() -> SimpleNamespace:
    if not WHEEL.is_file():
        pytest.skip(f"mlrun's wheel is missing ({WHEEL}): run `make install`")
    with zipfile.ZipFile(WHEEL) as wheel:
        sources = {
            "options": _source(wheel, "mlrun/data_types/data_types.py", "InferOptions"),
            "stats": _source(
                wheel, "mlrun/data_types/infer.py", "default_num_bins", "get_df_stats"
            ),
            "inputs": _source(
                wheel, "mlrun/model_monitoring/helpers.py", "calculate_inputs_statistics"
            ),
            "pad": _source(
                wheel,
                "mlrun/common/model_monitoring/helpers.py",
                *("FeatureStats", "Histogram", "BinCounts", "BinEdges", "_MAX_FLOAT"),
                *("_get_counts", "_get_edges", "pad_hist", "pad_features_hist"),
            ),
            "histogram": _source(
                wheel,
                "mlrun/model_monitoring/applications/context.py",
                "dict_to_histogram",
                within="MonitoringApplicationContext",
            ),
            "constants": _source(
                wheel,
                "mlrun/common/schemas/model_monitoring/constants.py",
                "ResultKindApp",
                "ResultStatusApp",
                "HistogramDataDriftApplicationConstants",
            ),
            "metrics": wheel.read("mlrun/model_monitoring/metrics/histogram_distance.py").decode(),
            "classifier": _source(
                wheel,
                "mlrun/model_monitoring/applications/histogram_data_drift.py",
                "InvalidMetricValueError",
                "InvalidThresholdValueError",
                "DataDriftClassifier",
            ),
            "app": _source(
                wheel,
                "mlrun/model_monitoring/applications/histogram_data_drift.py",
                "metrics",
                "_compute_metrics_per_feature",
                "_get_general_drift_result",
                "_get_metrics",
                within="HistogramDataDriftApplication",
            ),
        }
    ns = _module("mlrun_reference_oracle")
    ns.update(np=np, pd=pd, sys=sys, typing=typing, packaging=packaging, Enum=Enum, IntEnum=IntEnum)
    _run(sources["options"], ns)
    _run(sources["stats"], ns)
    _run(sources["pad"], ns)
    # calculate_inputs_statistics reaches the pieces above through the ``mlrun`` package.
    infer = SimpleNamespace(DFDataInfer=SimpleNamespace(get_stats=ns["get_df_stats"]))
    infer.InferOptions = ns["InferOptions"]
    ns["mlrun"] = SimpleNamespace(
        data_types=SimpleNamespace(infer=infer),
        common=SimpleNamespace(
            model_monitoring=SimpleNamespace(
                helpers=SimpleNamespace(FeatureStats=ns["FeatureStats"])
            )
        ),
    )
    _run(sources["inputs"], ns)
    _run(sources["histogram"], ns)
    _run(sources["constants"], ns)
    metrics = _run(sources["metrics"], _module("mlrun_reference_metrics"))
    ns.update({name: value for name, value in metrics.items() if not name.startswith("_")})
    ns.update(dataclass=dataclasses.dataclass, cast=typing.cast, DataFrame=pd.DataFrame)
    ns.update(
        abc=abc,
        mm_results=SimpleNamespace(
            ModelMonitoringApplicationMetric=_Metric, ModelMonitoringApplicationResult=_Result
        ),
    )
    ns["mm_context"] = SimpleNamespace(MonitoringApplicationContext=object)
    _run(sources["classifier"], ns)
    # The application's methods, on a class of their own (its base class is mlrun's platform).
    methods = _run(
        sources["app"], _module("mlrun_reference_app") | ns | {"__name__": "mlrun_reference_app"}
    )
    app_class = type(
        "HistogramDataDriftApplication",
        (),
        {
            "metrics": methods["metrics"],
            "_compute_metrics_per_feature": methods["_compute_metrics_per_feature"],
            "_get_general_drift_result": methods["_get_general_drift_result"],
            "_get_metrics": staticmethod(methods["_get_metrics"]),
        },
    )
    return SimpleNamespace(**ns, App=app_class)


def mlrun_df_stats(df: pd.DataFrame, bins: int = 20) -> dict[str, Any]:
    """mlrun's ``get_df_stats(df, InferOptions.Histogram, num_bins=bins)``."""
    m = _mlrun()
    return m.get_df_stats(df, m.InferOptions.Histogram, num_bins=bins)


def mlrun_padded(stats: dict[str, Any]) -> dict[str, Any]:
    """mlrun's ``pad_features_hist``, on a copy (mlrun pads in place)."""
    padded = copy.deepcopy(stats)
    _mlrun().pad_features_hist(padded)
    return padded


def mlrun_inputs_statistics(reference: dict[str, Any], sample_df: pd.DataFrame) -> dict[str, Any]:
    return _mlrun().calculate_inputs_statistics(reference, sample_df)


def mlrun_drift(
    reference_stats: dict[str, Any], sample_df: pd.DataFrame
) -> tuple[dict[str, Any], dict[str, float], float, int]:
    """mlrun's histogram data-drift application on ``sample_df`` against the (unpadded)
    reference: ``(per feature metrics, {"<metric>_mean": value}, general drift, status)``."""
    m = _mlrun()
    padded = mlrun_padded(reference_stats)
    context = SimpleNamespace(
        feature_stats=padded,
        sample_df_stats=m.calculate_inputs_statistics(padded, sample_df),
        logger=_Logger(),
        dict_to_histogram=m.dict_to_histogram,
    )
    app = m.App()
    app._value_classifier = m.DataDriftClassifier()
    per_feature = app._compute_metrics_per_feature(context)
    metrics = app._get_metrics(per_feature)
    result = app._get_general_drift_result(metrics)
    means = {metric.name: metric.value for metric in metrics}
    return per_feature.T.to_dict(), means, result.value, int(result.status)
