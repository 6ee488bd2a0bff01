"""The bounded span queue between a request's spans and the OTLP exporter
(docs/observability.md#tracing): ending a span never waits on the collector."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from prometheus_client import Counter

from mlserve.monitoring.metrics import REGISTRY

__all__ = ["SPANS_DROPPED", "BoundedSpanProcessor"]

logger = logging.getLogger("mlserve.tracing")
SPANS_DROPPED = Counter(
    "mlserve_trace_spans_dropped",
    "Spans dropped: the export queue was full (the collector is down or slow).",
    registry=REGISTRY,
)
_QUEUE = 2048
_BATCH = 512


class BoundedSpanProcessor(SpanProcessor):
    """A span processor that never blocks the thread ending a span: ended spans go to a
    bounded deque (a full one drops and counts), a daemon thread exports them every
    second or every ``batch`` spans, and shutdown sends what is left."""

    def __init__(
        self, exporter: Any, max_queue: int = _QUEUE, batch: int = _BATCH, interval: float = 1.0
    ) -> None:
        self.exporter = exporter
        self.max_queue = max_queue
        self.batch = batch
        self.interval = interval
        self.queue: deque[Any] = deque()
        self.dropped = 0
        self.failed_at = 0.0  # when an export last failed (its warning is rate-limited)
        self.wake = threading.Event()
        self.stopping = False
        self.lock = threading.Lock()  # one export at a time: the thread's or a flush
        self.thread = threading.Thread(target=self._run, name="mlserve-otlp", daemon=True)
        self.thread.start()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None or not context.trace_flags.sampled:
            return
        queue = self.queue
        if len(queue) >= self.max_queue:
            self.dropped += 1
            SPANS_DROPPED.inc()
            return
        queue.append(span)
        if len(queue) >= self.batch:
            self.wake.set()

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(self.interval)
            self.wake.clear()
            self._export_all()

    def _export_all(self) -> None:
        with self.lock:
            while self.queue:
                spans = [self.queue.popleft() for _ in range(min(self.batch, len(self.queue)))]
                self._export(spans)

    def _export(self, spans: list[Any]) -> None:
        try:
            result = self.exporter.export(spans)
            failed = getattr(result, "name", "SUCCESS") != "SUCCESS"
        except Exception as exc:  # an exporter's bug must not end the thread
            failed = True
            logger.debug("span export raised: %s", exc)
        now = time.monotonic()
        if failed and now - self.failed_at > 60:
            self.failed_at = now
            logger.warning(
                "could not export %d spans to the OTLP collector (down, or refusing them); "
                "said at most once a minute, --log-level debug tells why",
                len(spans),
            )

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._export_all()
        return True

    def shutdown(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=self.interval + 1)
        self._export_all()
        self.exporter.shutdown()
