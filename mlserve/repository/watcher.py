"""``RepositoryWatcher``: hot reload by polling (docs/repository.md#hot-reload).

Every ``poll_interval`` seconds a daemon thread runs ``repository.sync()``:
the config file is read again when it changed, new versions load (in this
thread, off the event loop) once complete (unchanged for the repository's
quiet period, whatever the poll interval) and publish when ready, versions
leaving the policy retire. A failing poll is logged and the next one tries again.
"""

from __future__ import annotations

import logging
import threading

from mlserve.repository.repository import ModelRepository

__all__ = ["RepositoryWatcher"]

logger = logging.getLogger("mlserve.repository")


class RepositoryWatcher:
    """Polls a repository until ``stop()``."""

    def __init__(self, repository: ModelRepository, poll_interval: float = 1.0) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be positive, got {poll_interval}")
        self.repository = repository
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True, name="mlserve-repository")

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_interval):
            try:
                self.repository.sync(stable_only=True)
            except Exception:
                logger.exception("polling the model repository failed")
