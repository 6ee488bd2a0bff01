"""The bounded span queue between a request's spans and the OTLP collector
(docs/observability.md#tracing): ending a span never waits on the collector.

Ended spans are encoded at once (their objects are fresh in the processor's caches:
that costs half of encoding them later on another thread) and wait in a deque of at
most ``OTEL_BSP_MAX_QUEUE_SIZE`` (2048); a thread of its own sends them in batches of
``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (512), when a batch is full or every
``OTEL_BSP_SCHEDULE_DELAY`` milliseconds (1000). A span that finds
the queue full, or whose export failed, is dropped and counted
(``mlserve_trace_spans_dropped_total``): a collector that is down or slow costs a
request nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Protocol

from prometheus_client import Counter

from mlserve.core.tracing import Span
from mlserve.monitoring.metrics import REGISTRY
from mlserve.monitoring.otlp import SpanEncoder

__all__ = ["SPANS_DROPPED", "SpanQueue"]

logger = logging.getLogger("mlserve.tracing")
SPANS_DROPPED = Counter(
    "mlserve_trace_spans_dropped",
    "Spans dropped: the export queue was full, or the collector was down or refused them.",
    registry=REGISTRY,
)


class Sender(Protocol):
    def send(self, body: bytes) -> None: ...

    def close(self) -> None: ...


class SpanQueue:
    """Takes ended spans without blocking (:meth:`put` is ``tracing``'s sink) and sends
    them from a daemon thread; :meth:`shutdown` sends what is left."""

    def __init__(
        self,
        encoder: SpanEncoder,
        sender: Sender,
        max_queue: int = 2048,
        batch: int = 512,
        interval: float = 1.0,
    ) -> None:
        self.encoder = encoder
        self.sender = sender
        self.max_queue = max_queue
        self.batch = batch
        self.interval = interval
        self.queue: deque[bytes] = deque()  # each span encoded as it ends
        self.dropped = 0
        self.failed_at = 0.0  # when an export last failed (its warning is rate-limited)
        self.wake = threading.Event()
        self.stopping = False
        self.lock = threading.Lock()  # one export at a time: the thread's or a flush
        self.thread = threading.Thread(target=self._run, name="mlserve-otlp", daemon=True)
        self.thread.start()

    def put(self, span: Span) -> None:
        queue = self.queue
        if len(queue) >= self.max_queue:
            self._drop(1)
            return
        try:
            queue.append(self.encoder.span(span))
        except Exception as exc:  # a bug here must not fail the request
            self._failed(exc, 1)
            return
        if len(queue) == self.batch:
            self.wake.set()

    def _drop(self, count: int) -> None:
        self.dropped += count
        SPANS_DROPPED.inc(count)

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(self.interval)
            self.wake.clear()
            self.flush()

    def flush(self) -> None:
        """Send every span queued now, in batches."""
        with self.lock:
            queue = self.queue
            while queue:
                spans = [queue.popleft() for _ in range(min(self.batch, len(queue)))]
                self._send(self.encoder.request(spans), len(spans))

    def _send(self, body: bytes, count: int) -> None:
        try:
            self.sender.send(body)
        except Exception as exc:  # down, refusing: the thread goes on
            self._failed(exc, count)

    def _failed(self, error: Exception, count: int) -> None:
        self._drop(count)
        now = time.monotonic()
        if now - self.failed_at > 60:
            self.failed_at = now
            logger.warning(
                "could not export %d spans to the OTLP collector (%s); they are dropped and "
                "counted, and this is said at most once a minute",
                count,
                str(error).splitlines()[0][:200] if str(error) else type(error).__name__,
            )

    def shutdown(self) -> None:
        self.stopping = True
        self.wake.set()
        self.thread.join(timeout=self.interval + 1)
        self.flush()
        self.sender.close()
