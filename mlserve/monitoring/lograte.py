"""``LogEvery``: one warning per pause for a fault that repeats (a target that is down),
with the count of those left out, so the monitor's log stays readable."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["LogEvery"]


class LogEvery:
    """Lets a line through at most once every ``seconds``, counting the ones held back."""

    def __init__(self, seconds: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._last: float | None = None
        self._held = 0
        self._lock = threading.Lock()

    def take(self) -> int | None:
        """None when the line is held back (and counted); otherwise write it: this many
        were held back since the last one written."""
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self.seconds:
                self._held += 1
                return None
            self._last = now
            held, self._held = self._held, 0
            return held
