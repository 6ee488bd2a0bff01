"""``ModelCache``: lazy loading with at most N model versions in memory
(docs/repository.md#lazy-loading-and-the-cache).

With a cache, the repository publishes every version in the policy without
loading it; a ``VersionRoute`` loads its model on its first request (the
request waits for the load) and tells the cache, which unloads the least
recently used versions beyond ``size``. A victim still answering requests
unloads when its last one finishes, so for that moment one more is loaded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from mlserve.repository.routes import VersionRoute

__all__ = ["ModelCache"]


class ModelCache:
    """Least-recently-used set of loaded versions."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"cache_size must be at least 1, got {size}")
        self.size = size
        self._loaded: OrderedDict[str, VersionRoute] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def keys(self) -> list[str]:
        """Loaded versions, least recently used first."""
        return list(self._loaded)

    def loaded(self, route: VersionRoute) -> None:
        """A version was loaded: it is the most recent; evict beyond the size."""
        with self._lock:
            self._loaded[route.key] = route
            self._loaded.move_to_end(route.key)
            victims = []
            while len(self._loaded) > self.size:
                victims.append(self._loaded.popitem(last=False)[1])
        for victim in victims:
            victim.unload()

    def used(self, route: VersionRoute) -> None:
        with self._lock:
            if self._loaded.get(route.key) is route:
                self._loaded.move_to_end(route.key)

    def unloaded(self, route: VersionRoute) -> None:
        with self._lock:
            if self._loaded.get(route.key) is route:
                del self._loaded[route.key]
