"""Monitoring: the model-log stream, endpoint records and Prometheus metrics
(docs/monitoring.md).

Importing this package loads nothing: the model layer reaches only
``recorder``; the rest (pydantic records, stream clients, SQLAlchemy) loads
when a server turns tracking on.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ModelTracker", "setup"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mlserve.monitoring import tracking

        return getattr(tracking, name)
    raise AttributeError(f"module 'mlserve.monitoring' has no attribute {name!r}")
