"""The web console's charts: each model's requests, errors and latency over the last
15 minutes (docs/console.md#data-endpoints).

A task on the server's event loop samples, every ``EVERY`` seconds, the counters the
models already keep for ``/metrics`` (``mlserve.core.recorder``) and keeps the
difference since the previous sample: nothing is added to a request's path, no request
scans anything, and each model keeps ``POINTS`` points at most.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from mlserve.core.recorder import LATENCY_BUCKETS, recorders
from mlserve.server.serving import Serving
from mlserve.server.stats import find_models

__all__ = ["EVERY", "POINTS", "History", "quantile_ms", "run_history"]

logger = logging.getLogger("mlserve.server")

EVERY = 5  # seconds between points
POINTS = 180  # points kept per model: 15 minutes
_FIELDS = ("t", "rps", "errors", "p50_ms", "p99_ms")


def quantile_ms(buckets: list[int], q: float) -> float | None:
    """The ``q`` quantile, in ms, of latencies counted per histogram bucket
    (``LATENCY_BUCKETS``, then +Inf), linear within its bucket; None without calls."""
    total = sum(buckets)
    if not total:
        return None
    wanted = q * total
    seen = 0
    for index, count in enumerate(buckets):
        if count and seen + count >= wanted:
            lower = LATENCY_BUCKETS[index - 1] if index else 0.0
            if index == len(LATENCY_BUCKETS):  # past the last bound: the bound is all we know
                return round(lower * 1000, 3)
            upper = LATENCY_BUCKETS[index]
            return round((lower + (upper - lower) * (wanted - seen) / count) * 1000, 3)
        seen += count
    return round(LATENCY_BUCKETS[-1] * 1000, 3)


class History:
    """The points of each served model version (``"<name>:<version>"``), at most
    ``POINTS`` each; ``sample()`` adds one."""

    def __init__(self) -> None:
        self.series: dict[str, dict[str, deque[Any]]] = {}
        self._totals: dict[str, tuple[int, int, list[int]]] = {}  # the last sample's counters
        self._at: float | None = None  # when the last sample was taken

    def sample(self, server: Serving, now: float | None = None) -> None:
        """Add one point per served model: its rates since the previous sample (the
        first sample only takes the counters in)."""
        now = time.time() if now is None else now
        served = {(m.name, m.version) for m in find_models(server)}
        since, self._at = self._at, now
        totals: dict[str, tuple[int, int, list[int]]] = {}
        for recorder in recorders():
            if (recorder.name, recorder.version) in served:
                totals[f"{recorder.name}:{recorder.version}"] = _totals(recorder.snapshot())
        for key in set(self.series) - set(totals):  # unloaded: its points go with it
            del self.series[key]
        previous, self._totals = self._totals, totals
        if since is None or now <= since:
            return
        seconds = now - since
        zero = (0, 0, [0] * (len(LATENCY_BUCKETS) + 1))  # a recorder made since: all is new
        for key, (requests, errors, buckets) in totals.items():
            before = previous.get(key, zero)
            calls = [count - old for count, old in zip(buckets, before[2], strict=True)]
            point = (
                round(now, 3),
                round((requests - before[0]) / seconds, 3),
                round((errors - before[1]) / seconds, 3),
                quantile_ms(calls, 0.5),
                quantile_ms(calls, 0.99),
            )
            series = self.series.get(key)
            if series is None:
                series = self.series[key] = {name: deque(maxlen=POINTS) for name in _FIELDS}
            for name, value in zip(_FIELDS, point, strict=True):
                series[name].append(value)

    def to_dict(self) -> dict[str, Any]:
        """``/console/api/history``'s answer."""
        series = {
            key: {name: list(values) for name, values in points.items()}
            for key, points in self.series.items()
        }
        return {"every": EVERY, "now": round(time.time(), 3), "series": series}


def _totals(
    snapshot: list[tuple[str, int, int, float, list[int], float]],
) -> tuple[int, int, list[int]]:
    """Requests, errors and latency buckets of every operation of one model version."""
    requests = errors = 0
    buckets = [0] * (len(LATENCY_BUCKETS) + 1)
    for _op, op_requests, op_errors, _seconds, op_buckets, _created in snapshot:
        requests += op_requests
        errors += op_errors
        buckets = [a + b for a, b in zip(buckets, op_buckets, strict=True)]
    return requests, errors, buckets


async def run_history(server: Serving, history: History) -> None:
    """Sample every ``EVERY`` seconds until cancelled (at shutdown)."""
    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        try:
            history.sample(server)
        except Exception:  # a sample never stops the server, nor the next sample
            logger.exception("console history: a sample failed")
        due += EVERY
        await asyncio.sleep(max(0.0, due - loop.time()))
