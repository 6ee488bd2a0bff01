"""Model endpoint records (docs/monitoring.md#endpoint-records), and the registry that
keeps them.

Each model (and each ensemble, as a router whose children are leaves) of a
tracked function is registered once at start. Requests only bump in-memory
counters; the registry writes them to its store every ``flush_every``
seconds and at shutdown, so a request never waits for a database. A shadow
model's record also counts how its answers compared with its primary's
(docs/graphs.md#shadow-routes): the registry reads each shadow's totals and writes
what they gained since its last write, so the counts of several workers add up.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Any

from pydantic import BaseModel, Field

from mlserve.monitoring.records import at_ns

__all__ = [
    "EndpointMetadata",
    "EndpointRegistry",
    "EndpointSpec",
    "EndpointStatus",
    "EndpointType",
    "ModelEndpoint",
    "RequestCounts",
    "SHADOW_RESULTS",
    "Tally",
    "endpoint_uid",
    "shadow_metrics",
]

logger = logging.getLogger("mlserve.monitoring")

SHADOW_RESULTS = ("agree", "disagree", "error", "dropped")
"""A shadow's counts in its record (``status.metrics["shadow"]``), beside ``agreement``."""


class EndpointType(IntEnum):
    NODE = 1
    ROUTER = 2
    LEAF = 3


def endpoint_uid(project: str, function: str, tag: str, model: str, version: str) -> str:
    """The same function and model give the same uid, on every restart and replica."""
    key = f"{project}_{function}_{tag or 'N/A'}_{model}_{version or 'latest'}"
    return hashlib.sha1(key.encode()).hexdigest()


class EndpointMetadata(BaseModel):
    project: str
    uid: str
    labels: dict[str, Any] = Field(default_factory=dict)


class EndpointSpec(BaseModel):
    function_uri: str
    model: str
    """``name:version``; an unversioned model is ``name:latest``."""
    model_class: str = ""
    model_uri: str = ""
    stream_path: str = ""
    feature_names: list[str] = Field(default_factory=list)
    """The model's declared input names (mlrun's ``feature_names``); empty when undeclared."""
    label_names: list[str] = Field(default_factory=list)
    """The model's declared output names (mlrun's ``label_names``)."""
    feature_stats: dict[str, Any] = Field(default_factory=dict)
    """The training set's statistics, the reference of drift (mlrun's format:
    ``mlserve.monitoring.feature_stats``); empty when the model has none."""
    active: bool = True
    monitoring_mode: str = "enabled"
    """``enabled`` when the model-log stream is on, else ``disabled``."""


class EndpointStatus(BaseModel):
    endpoint_type: EndpointType = EndpointType.NODE
    children: list[str] = Field(default_factory=list)
    children_uids: list[str] = Field(default_factory=list)
    first_request: datetime | None = None
    last_request: datetime | None = None
    error_count: int = 0
    metrics: dict[str, Any] = Field(default_factory=dict)
    """``{"requests": n}``: calls counted so far; a shadow model's also ``"shadow":
    {"agree", "disagree", "error", "dropped", "agreement"}`` (``agreement``: the share of
    compared answers that agreed, None before one was compared)."""
    current_stats: dict[str, Any] = Field(default_factory=dict)
    """The last monitored window's input statistics, histogrammed on the reference's
    padded edges (docs/monitoring.md#drift)."""
    drift_measures: dict[str, Any] = Field(default_factory=dict)
    """Per feature ``{tvd, hellinger, kld}``, plus ``tvd_mean``, ``hellinger_mean``,
    ``kld_mean`` and ``general_drift``."""
    drift_status: str = ""
    """``NO_DRIFT``, ``POSSIBLE_DRIFT`` or ``DRIFT_DETECTED``; empty until a window with a
    reference was monitored."""
    window: dict[str, Any] = Field(default_factory=dict)
    """The last monitored window: ``start``, ``end``, ``requests``, ``errors``, ``late``,
    ``latency_mean_us``, ``latency_p50_us``, ``latency_p99_us``, ``predictions_per_second``."""
    results: dict[str, Any] = Field(default_factory=dict)
    """Monitoring applications' results of the last window, by application then result
    name: ``{"value", "kind", "status", "extra_data"}``."""


class ModelEndpoint(BaseModel):
    metadata: EndpointMetadata
    spec: EndpointSpec
    status: EndpointStatus = Field(default_factory=EndpointStatus)


@dataclass(slots=True)
class RequestCounts:
    """Calls of one endpoint not yet written to the store."""

    first: datetime
    last: datetime
    requests: int = 0
    errors: int = 0

    def merge(self, other: RequestCounts) -> None:
        self.first = min(self.first, other.first)
        self.last = max(self.last, other.last)
        self.requests += other.requests
        self.errors += other.errors


def shadow_metrics(counts: dict[str, int]) -> dict[str, Any]:
    """A shadow's counts as its record shows them, with the share that agreed."""
    compared = counts.get("agree", 0) + counts.get("disagree", 0)
    shown: dict[str, Any] = {name: int(counts.get(name, 0)) for name in SHADOW_RESULTS}
    shown["agreement"] = counts.get("agree", 0) / compared if compared else None
    return shown


class Tally:
    """One endpoint's successful calls, counted by request threads without a lock.

    A call is ``next(tally.calls)`` and, when later than ``last`` (or earlier than
    ``first``), a store of its start: each atomic under the GIL (two threads racing may
    keep the earlier of their two starts as ``last``, microseconds apart). The flusher
    reads the count by a ``next()`` of its own, which it subtracts, and folds the calls
    since its last read into ``RequestCounts``.
    """

    __slots__ = ("calls", "first", "last", "_reads", "_folded")

    def __init__(self, first: int) -> None:
        self.calls = itertools.count()
        # Starts as time.time_ns() readings (the model's own: an int compares cheaply).
        self.first = first  # never reset: a store keeps the earliest
        self.last = first
        self._reads = 0  # next() calls of the flusher
        self._folded = 0  # calls already folded into counts

    def take(self) -> int:
        """Calls since the last take (flusher side, under the registry's lock)."""
        total = next(self.calls) - self._reads
        self._reads += 1
        new, self._folded = total - self._folded, total
        return new


class EndpointRegistry:
    """Endpoint records in a store (see :mod:`mlserve.monitoring.stores`)."""

    def __init__(self, store: Any, flush_every: float = 5.0) -> None:
        self.store = store
        self.flush_every = flush_every
        self._counts: dict[str, RequestCounts] = {}
        self._tallies: dict[str, Tally] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shadow_totals: Callable[[], dict[str, dict[str, int]]] | None = None
        self._shadow_written: dict[str, dict[str, int]] = {}  # the totals already in the store

    def register(self, endpoint: ModelEndpoint) -> None:
        """Create the record, or update its spec; request counters are kept."""
        self.store.upsert(endpoint)

    def count(self, uid: str, when: datetime, error: bool = False) -> None:
        """Count one call (in memory)."""
        with self._lock:
            counts = self._counts.get(uid)
            if counts is None:
                counts = self._counts[uid] = RequestCounts(when, when)
                if self._thread is None:
                    self._start_flusher()
            elif when > counts.last:  # calls come mostly in order: one comparison
                counts.last = when
            elif when < counts.first:
                counts.first = when
            counts.requests += 1
            if error:
                counts.errors += 1

    def tally(self, uid: str, when: int) -> Tally:
        """The lock-free counter of ``uid``'s successful calls (``when``: the first one's
        start, in ``time_ns()``; the tally does not count it: the caller does). Asked again after
        ``close()``, it starts the flusher again."""
        with self._lock:
            tally = self._tallies.get(uid)
            if tally is None:
                tally = self._tallies[uid] = Tally(when)
            if self._thread is None:
                self._start_flusher()
            return tally

    def _fold_tallies(self) -> None:
        """Move the tallied calls into the counters (under the lock)."""
        for uid, tally in self._tallies.items():
            new = tally.take()
            if not new:
                continue
            tallied = RequestCounts(at_ns(tally.first), at_ns(tally.last), new)
            counts = self._counts.get(uid)
            if counts is None:
                self._counts[uid] = tallied
            else:
                counts.merge(tallied)

    def watch_shadows(self, totals: Callable[[], dict[str, dict[str, int]]]) -> None:
        """Where each flush reads the shadows' counts: this process's totals since it
        started (``SHADOW_RESULTS``), by the shadow model's uid."""
        self._shadow_totals = totals

    def _flush_shadows(self) -> None:
        """Add what each shadow's totals gained since the last write (under the lock);
        a failed write is retried by the next flush."""
        if self._shadow_totals is None:
            return
        for uid, totals in self._shadow_totals().items():
            written = self._shadow_written.get(uid, {})
            gained = {name: totals.get(name, 0) - written.get(name, 0) for name in SHADOW_RESULTS}
            if any(gained.values()):
                self.store.add_shadow_counts(uid, gained)
                self._shadow_written[uid] = dict(totals)

    def _start_flusher(self) -> None:
        self._thread = threading.Thread(
            target=self._flush_loop, daemon=True, name="mlserve-endpoints"
        )
        self._thread.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_every):
            try:
                self.flush()
            except Exception:
                logger.exception(
                    "endpoint records: writing request counters failed; kept for later"
                )

    def flush(self) -> None:
        """Write the counters gathered since the last flush."""
        with self._lock:
            self._fold_tallies()
            counts, self._counts = self._counts, {}
        for uid in list(counts):
            try:
                self.store.add_counts(uid, counts[uid])
            except Exception:
                self._restore(counts)
                raise
            del counts[uid]
        with self._lock:
            self._flush_shadows()

    def _restore(self, counts: dict[str, RequestCounts]) -> None:
        with self._lock:
            for uid, pending in counts.items():
                current = self._counts.get(uid)
                if current is None:
                    self._counts[uid] = pending
                else:
                    current.merge(pending)

    def list(self, project: str | None = None) -> list[ModelEndpoint]:
        return self.store.list(project)

    def get(self, uid: str) -> ModelEndpoint | None:
        return self.store.get(uid)

    def close(self) -> None:
        """Stop the flusher and write what is left (at server shutdown)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.flush_every + 5)
        with self._lock:  # a later count() starts the flusher again
            self._thread = None
            self._stop = threading.Event()
        try:
            self.flush()
        finally:
            self.store.close()
