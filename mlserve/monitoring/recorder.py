"""The model layer's small door to the Prometheus metrics.

``V2ModelServer`` calls ``model_recorder(name, version).ok(op, seconds)``;
``prometheus_client`` is imported at the first call, not at ``import mlserve``,
and each (model, operation) resolves its labelled children once.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ModelRecorder", "model_recorder"]


class ModelRecorder:
    """Requests, errors, latency and load time of one model version."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self._ops: dict[str, tuple[Any, Any, Any]] = {}

    def _children(self, op: str) -> tuple[Any, Any, Any]:
        children = self._ops.get(op)
        if children is None:
            from mlserve.monitoring import metrics

            labels = (self.name, self.version, op)
            children = (
                metrics.MODEL_REQUESTS.labels(*labels),
                metrics.MODEL_ERRORS.labels(*labels),
                metrics.MODEL_LATENCY.labels(*labels),
            )
            self._ops[op] = children
        return children

    def ok(self, op: str, seconds: float) -> None:
        requests, _, latency = self._children(op)
        requests.inc()
        latency.observe(seconds)

    def error(self, op: str) -> None:
        requests, errors, _ = self._children(op)
        requests.inc()
        errors.inc()

    def loaded(self, seconds: float) -> None:
        from mlserve.monitoring import metrics

        metrics.MODEL_LOAD_SECONDS.labels(self.name, self.version).set(seconds)


_recorders: dict[tuple[str, str], ModelRecorder] = {}
_lock = threading.Lock()


def model_recorder(name: str, version: str) -> ModelRecorder:
    """The (cached) recorder of model ``name`` version ``version``."""
    recorder = _recorders.get((name, version))
    if recorder is None:
        with _lock:
            recorder = _recorders.setdefault((name, version), ModelRecorder(name, version))
    return recorder
