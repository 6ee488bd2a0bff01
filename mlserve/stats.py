"""Per-model inference and execution counters (``model.stats``), served as
Triton-style statistics at ``/v2/models[/<m>[/versions/<v>]]/stats``.

An *inference* is one request; an *execution* is one call of the model's code,
which may serve several requests when they are batched (the batcher records
executions itself; without batching each inference is one execution).
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["ModelStats"]


class _Duration:
    __slots__ = ("count", "ns")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


class ModelStats:
    """Counters of one model; safe to update from the worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_inference = 0  # ms since the epoch, 0 before the first
        self.success = _Duration()
        self.fail = _Duration()
        self.compute_infer = _Duration()
        self.batches: dict[int, _Duration] = {}

    @property
    def inference_count(self) -> int:
        """Requests answered (Triton counts no failed one)."""
        return self.success.count

    @property
    def execution_count(self) -> int:
        """Calls of the model's code."""
        return self.compute_infer.count

    def record_inference(self, ok: bool, duration_ns: int) -> None:
        """One request answered (``ok``) or failed, end to end in the model."""
        with self._lock:
            self.last_inference = time.time_ns() // 1_000_000
            durations = self.success if ok else self.fail
            durations.count += 1
            durations.ns += duration_ns

    def record_execution(self, batch_size: int, duration_ns: int) -> None:
        """One call of the model's code that served ``batch_size`` requests."""
        with self._lock:
            compute = self.compute_infer
            compute.count += 1
            compute.ns += duration_ns
            batch = self.batches.get(batch_size)
            if batch is None:
                batch = self.batches[batch_size] = _Duration()
            batch.count += 1
            batch.ns += duration_ns

    def record_call(self, duration_ns: int, compute_ns: int) -> None:
        """One request answered by one call of the model's code (no batching): both
        records under one lock, written out (every unbatched request pays these lines)."""
        with self._lock:
            self.last_inference = time.time_ns() // 1_000_000
            success = self.success
            success.count += 1
            success.ns += duration_ns
            compute = self.compute_infer
            compute.count += 1
            compute.ns += compute_ns
            single = self.batches.get(1)
            if single is None:
                single = self.batches[1] = _Duration()
            single.count += 1
            single.ns += compute_ns

    def to_dict(self, name: str, version: str) -> dict[str, Any]:
        """The Triton ``model_stats`` entry of this model."""
        zero = {"count": 0, "ns": 0}
        with self._lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.to_dict(),
                    "fail": self.fail.to_dict(),
                    "queue": dict(zero),
                    "compute_input": dict(zero),
                    "compute_infer": self.compute_infer.to_dict(),
                    "compute_output": dict(zero),
                    "cache_hit": dict(zero),
                    "cache_miss": dict(zero),
                },
                "batch_stats": [
                    {
                        "batch_size": size,
                        "compute_input": dict(zero),
                        "compute_infer": batch.to_dict(),
                        "compute_output": dict(zero),
                    }
                    for size, batch in sorted(self.batches.items())
                ],
            }
