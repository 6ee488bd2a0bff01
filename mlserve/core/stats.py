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

__all__ = ["ModelStats", "take_pending"]


def take_pending(pending: list[Any]) -> list[Any]:
    """What was appended to ``pending`` so far, removed from it; what other threads
    append meanwhile stays, after it (a slice and its ``del`` are each one step under the
    GIL). One taker at a time: the caller holds its lock."""
    taken = pending[: len(pending)]
    del pending[: len(taken)]
    return taken


class _Duration:
    __slots__ = ("count", "ns")

    def __init__(self) -> None:
        self.count = 0
        self.ns = 0

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


class ModelStats:
    """Counters of one model; safe to update from the worker threads.

    An unbatched answered call (every request of most models) only appends its
    numbers to a list, without a lock (``list +=`` a tuple is one step under the
    GIL); the counters take them in when they are read, or every ``FOLD_AT`` calls.
    """

    FOLD_AT = 3 * 1024  # numbers pending (three per call) that fold them into the counters

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[int] = []  # (start_ns, duration_ns, compute_ns) of each call, flat
        self._last_inference = 0  # ms since the epoch, 0 before the first
        self._success = _Duration()
        self.fail = _Duration()
        self._compute_infer = _Duration()
        self._batches: dict[int, _Duration] = {}

    @property
    def last_inference(self) -> int:
        self._fold()
        return self._last_inference

    @property
    def success(self) -> _Duration:
        self._fold()
        return self._success

    @property
    def compute_infer(self) -> _Duration:
        self._fold()
        return self._compute_infer

    @property
    def batches(self) -> dict[int, _Duration]:
        self._fold()
        return self._batches

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
            self._last_inference = time.time_ns() // 1_000_000
            durations = self._success if ok else self.fail
            durations.count += 1
            durations.ns += duration_ns

    def record_execution(self, batch_size: int, duration_ns: int) -> None:
        """One call of the model's code that served ``batch_size`` requests."""
        with self._lock:
            self._executed(batch_size, 1, duration_ns)

    def record_call(self, start_ns: int, duration_ns: int, compute_ns: int) -> None:
        """One request, started at ``start_ns`` (``time.time_ns()``), answered by one call
        of the model's code (no batching): a request and an execution of batch size 1."""
        calls = self._calls
        calls += (start_ns, duration_ns, compute_ns)
        if len(calls) >= self.FOLD_AT:
            self._fold()

    def _fold(self) -> None:
        """Take the pending calls into the counters."""
        calls = self._calls
        if not calls:
            return
        with self._lock:
            taken = take_pending(calls)
            if not taken:  # another reader took them first
                return
            count = len(taken) // 3
            success = self._success
            success.count += count
            success.ns += sum(taken[1::3])
            self._executed(1, count, sum(taken[2::3]))
            end_ms = (taken[-3] + taken[-2]) // 1_000_000  # the last call's end
            self._last_inference = max(self._last_inference, end_ms)

    def _executed(self, batch_size: int, count: int, duration_ns: int) -> None:
        """``count`` executions of ``batch_size`` that took ``duration_ns`` (under the lock)."""
        compute = self._compute_infer
        compute.count += count
        compute.ns += duration_ns
        batch = self._batches.get(batch_size)
        if batch is None:
            batch = self._batches[batch_size] = _Duration()
        batch.count += count
        batch.ns += duration_ns

    def to_dict(self, name: str, version: str) -> dict[str, Any]:
        """The Triton ``model_stats`` entry of this model."""
        zero = {"count": 0, "ns": 0}
        self._fold()
        with self._lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self._last_inference,
                "inference_count": self._success.count,
                "execution_count": self._compute_infer.count,
                "inference_stats": {
                    "success": self._success.to_dict(),
                    "fail": self.fail.to_dict(),
                    "queue": dict(zero),
                    "compute_input": dict(zero),
                    "compute_infer": self._compute_infer.to_dict(),
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
                    for size, batch in sorted(self._batches.items())
                ],
            }
