"""Per-model inference and execution counters (S10 statistics).

An *inference* is one request answered; an *execution* is one call of the
model's ``predict``. Without batching they match; with adaptive batching one
execution answers several inferences, and ``batch_sizes`` shows how many rows
each execution carried.
"""

from __future__ import annotations

import threading

__all__ = ["ModelStats"]


class ModelStats:
    """Thread-safe counters of one model version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inference_count = 0
        self.failure_count = 0
        self.inference_ns = 0
        self.execution_count = 0
        self.execution_ns = 0
        self.batch_sizes: dict[int, int] = {}
        """Executions by batch size (rows in the call): ``{size: count}``."""

    def record_inference(self, ok: bool, duration_ns: int) -> None:
        """Count one answered request (``ok`` False when it failed)."""
        with self._lock:
            if ok:
                self.inference_count += 1
            else:
                self.failure_count += 1
            self.inference_ns += duration_ns

    def record_execution(self, batch_size: int, duration_ns: int) -> None:
        """Count one call of the model carrying ``batch_size`` rows."""
        with self._lock:
            self.execution_count += 1
            self.execution_ns += duration_ns
            self.batch_sizes[batch_size] = self.batch_sizes.get(batch_size, 0) + 1
