"""``ResultsStream``: one JSON record per endpoint and monitored window, to any stream
target (docs/monitoring.md#results-stream).

The target is opened by URL like the model-log stream's (``open_stream``: a file,
``kafka://``, ``redis://``, ``http(s)://``). A target that is down never fails the
monitor: the records stay pending, bounded (the oldest give way, counted), and go with
the next write; failures are logged at most once every ten seconds. A push that fails
half-way (an HTTP target, record by record) is sent again whole: a receiver may see a
record twice, never miss one that was kept.
"""

from __future__ import annotations

import collections
import logging
from typing import Any, cast

import orjson

from mlserve.monitoring.endpoints import ModelEndpoint
from mlserve.monitoring.lograte import LogEvery
from mlserve.monitoring.streams import JsonStreamTarget, open_stream
from mlserve.protocol.tensors import dumps_strict

__all__ = ["ResultsStream", "result_record"]

logger = logging.getLogger("mlserve.monitoring")


def result_record(endpoint: ModelEndpoint) -> dict[str, Any]:
    """The record of ``endpoint``'s last window, read from its status."""
    status = endpoint.status
    return {
        "endpoint_id": endpoint.metadata.uid,
        "project": endpoint.metadata.project,
        "model": endpoint.spec.model,
        "function_uri": endpoint.spec.function_uri,
        "window": status.window,
        "drift_status": status.drift_status,
        "general_drift": status.drift_measures.get("general_drift"),
        "drift_measures": status.drift_measures,
        "current_stats": status.current_stats,
        "results": status.results,
    }


class ResultsStream:
    """Writes window results to the target of ``url`` (``stream_args`` go to it).

    ``max_pending``: records kept while the target is down, at most. ``sent``,
    ``failed`` (records in failed pushes, each try counted) and ``dropped`` count records.
    """

    def __init__(self, url: str, max_pending: int = 1000, **stream_args: Any) -> None:
        self.url = url
        self.max_pending = max_pending
        self.target = open_stream(url, **stream_args)
        self.sent = self.failed = self.dropped = 0
        self._encoded = callable(getattr(self.target, "push_json", None))
        self._keyed = bool(getattr(self.target, "uses_keys", True))
        self._pending: collections.deque[tuple[bytes, bytes]] = collections.deque()
        self._fail_log = LogEvery()
        self._drop_log = LogEvery()

    def write(self, endpoint: ModelEndpoint) -> bool:
        """Send the record of ``endpoint``'s window (set on its status), and any left
        pending; True when the target took them all. Never raises for the target."""
        line = dumps_strict(result_record(endpoint))  # strict JSON: NaN, inf are null
        self._pending.append((line, endpoint.spec.model.encode()))
        if len(self._pending) > self.max_pending:
            self._pending.popleft()
            self.dropped += 1
            if self._drop_log.take() is not None:
                logger.warning(
                    "results stream %s: %d records pending, the oldest dropped (%d in all)",
                    self.url,
                    self.max_pending,
                    self.dropped,
                )
        return self.flush()

    def flush(self) -> bool:
        """Push the pending records; True when none is left."""
        if not self._pending:
            return True
        lines = [line for line, _ in self._pending]
        try:
            if self._encoded:
                keys = [key for _, key in self._pending] if self._keyed else []
                cast(JsonStreamTarget, self.target).push_json(lines, keys)
            else:  # the target encodes dicts itself: give it the strict JSON's values
                self.target.push([orjson.loads(line) for line in lines])
        except Exception as exc:
            self.failed += len(lines)
            held = self._fail_log.take()
            if held is not None:
                logger.warning(
                    "results stream %s: push of %d records failed (%s); kept for the next write%s",
                    self.url,
                    len(lines),
                    exc,
                    f" ({held} more failures since the last line)" if held else "",
                )
            return False
        self.sent += len(lines)
        self._pending.clear()
        return True

    def close(self) -> None:
        """Push what is pending once more, count what is left as dropped, close the target."""
        if not self.flush():
            self.dropped += len(self._pending)
            logger.warning(
                "results stream %s: %d records not delivered at close", self.url, len(self._pending)
            )
            self._pending.clear()
        try:
            self.target.close()
        except Exception:
            logger.exception("results stream %s: closing the target failed", self.url)
