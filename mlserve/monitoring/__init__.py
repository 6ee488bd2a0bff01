"""Monitoring: the model-log stream, endpoint records, Prometheus metrics, and drift
(docs/monitoring.md).

Importing this package loads nothing: the model layer reaches only
``recorder``; the rest (pydantic records, stream clients, SQLAlchemy, pandas) loads
when a server turns tracking on, or when a name below is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {
    "ModelTracker": "tracking",
    "setup": "tracking",
    "feature_stats": "statistics",
    "DriftThresholds": "drift",
    "HistogramDataDriftApplication": "applications",
    "ModelMonitoringApplicationBase": "applications",
    "ModelMonitoringApplicationMetric": "applications",
    "ModelMonitoringApplicationResult": "applications",
    "MonitoringApplication": "applications",
    "MonitoringApplicationContext": "applications",
    "ResultKindApp": "applications",
    "ResultStatusApp": "applications",
}

__all__ = list(_MODULES)


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'mlserve.monitoring' has no attribute {name!r}")
    return getattr(importlib.import_module(f"mlserve.monitoring.{module}"), name)
