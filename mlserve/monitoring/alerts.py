"""``DriftAlerts``: one webhook POST when an endpoint's drift status rises
(docs/monitoring.md#drift-alerts).

The monitor calls ``observe`` once per endpoint and window. A status that rises
(``NO_DRIFT`` or "" to ``POSSIBLE_DRIFT`` or ``DRIFT_DETECTED``; ``POSSIBLE_DRIFT`` to
``DRIFT_DETECTED``) queues one alert; a status that stays sends nothing more, and one
that falls and rises again sends again. The last status of an endpoint starts as the
one its record holds, so a restarted monitor does not alert again on a drift it
already reported.

Sending never blocks or fails the monitor: alerts are encoded at once (strict JSON:
NaN and infinities are null) and POSTed by one background thread, from a bounded
queue (the oldest alert gives way, counted). A connection error or a 5xx is retried
``retries`` times with a doubling pause; a 4xx is not (the receiver refused the
alert: retrying cannot help). ``sent``, ``failed`` and ``dropped`` count alerts.
"""

from __future__ import annotations

import collections
import http.client
import logging
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from mlserve.monitoring.endpoints import ModelEndpoint
from mlserve.monitoring.lograte import LogEvery
from mlserve.protocol.tensors import dumps_strict

__all__ = ["DRIFT_EVENTS", "DRIFT_LEVELS", "DriftAlerts", "drift_alert"]

logger = logging.getLogger("mlserve.monitoring")

DRIFT_LEVELS = {"": 0, "NO_DRIFT": 0, "POSSIBLE_DRIFT": 1, "DRIFT_DETECTED": 2}
"""How high each drift status is: an alert goes when an endpoint's level rises."""
DRIFT_EVENTS = {1: "data-drift-suspected", 2: "data-drift-detected"}
"""mlrun's alert event kinds, by the level risen to."""


def drift_alert(
    endpoint: ModelEndpoint, previous: str, status: str, summary: dict[str, Any]
) -> dict[str, Any]:
    """The alert's JSON body: who drifted, from what to what, and the window's measures
    (``summary``'s ``general_drift``, ``drift_measures`` and ``window``), and the traces of
    the window's first calls (``trace_ids``: docs/observability.md#tracing)."""
    measures = summary.get("drift_measures") or {}
    window = summary.get("window") or {}
    return {
        "kind": "drift",
        "event": DRIFT_EVENTS[DRIFT_LEVELS[status]],
        "timestamp": datetime.now(UTC).isoformat(),
        "endpoint_id": endpoint.metadata.uid,
        "project": endpoint.metadata.project,
        "model": endpoint.spec.model,
        "function_uri": endpoint.spec.function_uri,
        "previous_status": previous,
        "status": status,
        "general_drift": summary.get("general_drift", measures.get("general_drift")),
        "window": window,
        "drift_measures": measures,
        "trace_ids": window.get("trace_ids") or [],
    }


class DriftAlerts:
    """POSTs a drift alert to ``url`` each time an endpoint's drift status rises.

    ``retries``: further tries of an alert after a connection error or a 5xx, the
    ``n``-th after ``backoff * 2**(n-1)`` seconds. ``timeout``: seconds per try.
    ``max_queue``: alerts waiting to be sent, at most. ``headers`` are added to each POST
    (an ``Authorization`` header, say). ``kind``: what the alerts are, as the log lines
    name them (``"rollout"`` for a canary's decisions).
    """

    def __init__(
        self,
        url: str,
        retries: int = 3,
        timeout: float = 5.0,
        backoff: float = 0.5,
        max_queue: int = 1000,
        headers: dict[str, str] | None = None,
        kind: str = "drift",
    ) -> None:
        if urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"the {kind} alert URL must be http:// or https://, not {url!r}")
        self.kind = kind
        self.url = url
        self.retries = max(int(retries), 0)
        self.timeout = timeout
        self.backoff = backoff
        self.max_queue = max_queue
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.sent = self.failed = self.dropped = 0
        self._last: dict[str, str] = {}  # each endpoint's last drift status
        self._queue: collections.deque[bytes] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._abort = threading.Event()  # close() ran out of time: stop retrying
        self._log = LogEvery()  # failed alerts
        self._drop_log = LogEvery()
        self._thread = threading.Thread(
            target=self._run, daemon=True, name=f"mlserve-{kind}-alerts"
        )
        self._thread.start()

    def observe(self, endpoint: ModelEndpoint, status: str, summary: dict[str, Any]) -> None:
        """Note ``endpoint``'s drift ``status`` of a window; queue an alert when it rose.

        ``endpoint``: the record as it was before this window (its ``drift_status`` is the
        previous window's: the first observation of an endpoint compares with it).
        ``summary``: ``general_drift``, ``drift_measures`` and ``window`` of the window.
        """
        level = DRIFT_LEVELS.get(status)
        if level is None:
            raise ValueError(f"unknown drift status {status!r} (one of {sorted(DRIFT_LEVELS)})")
        uid = endpoint.metadata.uid
        previous = self._last.get(uid)
        if previous is None:
            previous = endpoint.status.drift_status
        self._last[uid] = status
        if level <= DRIFT_LEVELS.get(previous, 0):
            return
        self._enqueue(dumps_strict(drift_alert(endpoint, previous, status, summary)))

    def post(self, alert: dict[str, Any]) -> None:
        """Queue any other alert for the same webhook (a rollout decision:
        docs/graphs.md#rolling-back-or-promoting-a-canary)."""
        self._enqueue(dumps_strict(alert))

    def _enqueue(self, body: bytes) -> None:
        with self._cond:
            if self._closing:
                self.dropped += 1
                logger.warning("%s alerts: an alert after close() is dropped", self.kind)
                return
            if len(self._queue) >= self.max_queue:
                self._queue.popleft()  # the oldest gives way to the newest
                self.dropped += 1
                if self._drop_log.take() is not None:
                    logger.warning(
                        "%s alerts: queue of %d full, oldest alert dropped (%d in all)",
                        self.kind,
                        self.max_queue,
                        self.dropped,
                    )
            self._queue.append(body)
            self._cond.notify()

    def close(self, timeout: float = 10.0) -> None:
        """Send what is queued, waiting up to ``timeout``; what is left is dropped."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        if self._thread.is_alive():  # stuck retrying a receiver that is down
            self._abort.set()
            self._thread.join(self.timeout + 1)
        with self._cond:
            left, self._queue = len(self._queue), collections.deque()
            self.dropped += left
        if left:
            logger.warning("%s alerts: %d alerts not sent at close", self.kind, left)

    # ---- sender thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue or self._abort.is_set():
                    return
                body = self._queue.popleft()
            try:
                self._deliver(body)
            except Exception:  # the sender must outlive anything
                logger.exception("%s alerts: sending an alert failed", self.kind)
                self.failed += 1

    def _deliver(self, body: bytes) -> None:
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                if self._abort.wait(self.backoff * 2 ** (attempt - 1)):
                    with self._cond:
                        self.dropped += 1
                    return
            try:
                self._post(body)
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    self._give_up(f"answered {exc.code}; a refused alert is not retried")
                    return
                error = f"answered {exc.code}"
            except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
                error = str(getattr(exc, "reason", exc))
            else:
                self.sent += 1
                return
        self._give_up(f"{error} after {self.retries + 1} tries")

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(self.url, body, self.headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()

    def _give_up(self, why: str) -> None:
        self.failed += 1
        held = self._log.take()
        if held is not None:
            more = f" ({held} more failures since the last line)" if held else ""
            logger.warning("%s alerts: POST %s %s%s", self.kind, self.url, why, more)
