"""Few log lines for many failed requests of one kind (docs/serving.md#errors-in-the-log).

A client error (4xx) or an expected 5xx (501, 503, 504) is one line with no
traceback. A client that sends a thousand bad requests a second must not fill
the disk: past ``per_key`` lines a second for one (status, model), or
``overall`` lines a second in all, lines are left out and counted, and the next
line of that kind says how many were.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["LineBudget", "model_in"]

Key = tuple[int, str]  # (status, model)
MAX_KEYS = 1024  # kinds with a count of lines left out; more share one per status


class LineBudget:
    """How many log lines of each kind may still be written this second."""

    def __init__(
        self,
        per_key: int = 5,
        overall: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_key = per_key
        self.overall = overall
        self._clock = clock
        self._second = clock()
        self._written: dict[Key, int] = {}  # this second's lines, by kind
        self._total = 0  # this second's lines in all
        self._left_out: dict[Key, int] = {}  # lines left out since each kind's last one
        self._lock = threading.Lock()

    def take(self, key: Key, force: bool = False) -> int | None:
        """None when the line is left out (and counted); otherwise it may be written,
        and this is how many of its kind were left out since the last one.
        ``force``: written whatever the budget (a line that must be in the log)."""
        now = self._clock()
        with self._lock:
            if now - self._second >= 1.0:
                self._second = now
                self._written.clear()
                self._total = 0
            if key not in self._left_out and len(self._left_out) >= MAX_KEYS:
                key = (key[0], "")
            written = self._written.get(key, 0)
            full = written >= self.per_key or self._total >= self.overall
            if full and not force:
                self._left_out[key] = self._left_out.get(key, 0) + 1
                return None
            self._written[key] = written + 1
            self._total += 1
            return self._left_out.pop(key, 0)


def model_in(path: str) -> str:
    """The model a request path names (``/v2/models/<m>/...``, ``/v1/models/<m>:op``,
    ``/v2/repository/models/<m>/load``), else ""."""
    parts = path.split("/", 5)
    for index in (2, 3):
        if index + 1 < len(parts) and parts[index] == "models":
            return parts[index + 1].partition(":")[0]
    return ""
