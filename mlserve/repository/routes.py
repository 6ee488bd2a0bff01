"""``VersionRoute``: one model version as a router's route.

It loads its model now (``load()``) or on the first request (lazy, with a
cache), counts the requests in flight, and unloads only when none is left:
a version leaving the policy keeps serving the requests it already took.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.events import Event
from mlserve.protocol.errors import ModelNotReady

__all__ = ["LOADING", "READY", "UNAVAILABLE", "LoadFailed", "VersionRoute"]

logger = logging.getLogger("mlserve.repository")

READY, LOADING, UNAVAILABLE = "READY", "LOADING", "UNAVAILABLE"

Hook = Callable[["VersionRoute"], None]


def _no_hook(route: VersionRoute) -> None:
    return None


class LoadFailed(RuntimeError):
    """The model's ``load()`` failed; the model logged it, and the message is its reason."""


class VersionRoute:
    """A model version: ``build()`` returns its loaded model (or raises)."""

    def __init__(
        self,
        key: str,
        build: Callable[[], Any],
        load_timeout: float = 300.0,
        on_load: Hook = _no_hook,
        on_use: Hook = _no_hook,
        on_unload: Hook = _no_hook,
    ) -> None:
        self.key = key
        self.model: Any = None
        self.inflight = 0
        self.loading = False
        self.retired = False
        self.error = ""
        self._build = build
        self._load_timeout = load_timeout
        self._on_load, self._on_use, self._on_unload = on_load, on_use, on_unload
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()
        self._unload_pending = False

    @property
    def object(self) -> Any:
        """The loaded model, None while it is not in memory (as ``TaskStep.object``)."""
        return self.model

    @property
    def state(self) -> str:
        if self.loading:
            return LOADING
        return READY if self.model is not None and not self.retired else UNAVAILABLE

    # ---- lifecycle ----------------------------------------------------------

    def load(self) -> Any:
        """The loaded model: built now unless it is (concurrent callers wait, bounded)."""
        if not self._load_lock.acquire(timeout=self._load_timeout):
            raise ModelNotReady(f"model {self.key} is still loading after {self._load_timeout}s")
        try:
            if self.model is not None:
                return self.model
            if self.error:
                raise ModelNotReady(f"model {self.key} failed to load: {self.error}")
            self.loading = True
            try:
                model = self._build()
            except LoadFailed as exc:
                self.error = str(exc)
                raise ModelNotReady(f"model {self.key} failed to load: {self.error}") from exc
            except Exception as exc:  # before the model could load: its class, its config
                self.error = f"{type(exc).__name__}: {exc}"
                logger.error("failed to load model %s: %s", self.key, self.error)
                raise ModelNotReady(f"model {self.key} failed to load: {self.error}") from exc
            finally:
                self.loading = False
            self.model = model
        finally:
            self._load_lock.release()
        self._on_load(self)
        return model

    def unload(self) -> None:
        """Unload the model now, or when its last request in flight finishes."""
        with self._lock:
            if self.inflight:
                self._unload_pending = True
                return
            model, self.model = self.model, None
            self._unload_pending = False
        if model is not None:
            self._dispose(model)

    def retire(self) -> None:
        """Take the route out of service: unload when idle (a straggler reloads, then unloads)."""
        self.retired = True
        self.unload()

    def _dispose(self, model: Any) -> None:
        model.ready = False
        unload = getattr(model, "unload", None)
        try:
            if callable(unload):
                unload()
        except Exception:
            logger.exception("model %s failed to unload", self.key)
        logger.info("unloaded model %s", self.key)
        self._on_unload(self)

    # ---- requests -------------------------------------------------------------

    def _enter(self) -> Any:
        with self._lock:
            self.inflight += 1
            return self.model

    def _leave(self) -> None:
        with self._lock:
            self.inflight -= 1
            idle = self.inflight == 0 and (self._unload_pending or self.retired)
            model = self.model if idle else None
            if model is not None:
                self.model, self._unload_pending = None, False
        if model is not None:
            # The last request may finish on the event loop: unloading runs elsewhere.
            threading.Thread(target=self._dispose, args=(model,), daemon=True).start()

    async def run_async(self, event: Event) -> Event:
        model = self._enter()
        try:
            if model is None:
                model = await run_in_threadpool(self.load)
            self._on_use(self)
            return await model.do_event_async(event)
        finally:
            self._leave()

    def run(self, event: Event) -> Event:
        model = self._enter()
        try:
            if model is None:
                model = self.load()
            self._on_use(self)
            return model.do_event(event)
        finally:
            self._leave()

    def iter_models(self) -> Iterator[Any]:
        if self.model is not None:
            yield self.model

    def __repr__(self) -> str:
        return f"VersionRoute({self.key!r}, state={self.state}, inflight={self.inflight})"
