"""The child function ``f2`` of ``tests/tracing/fn.py``'s ``split`` graph, fed by its Kafka
queue in a process of its own, traced to an OTLP endpoint:

    QUEUE_URL=kafka://... TRACE_FN=split python -m tests.tracing.queue_child ENDPOINT

``mlserve serve`` serves a whole function; a child function's part runs this way (a
``QueueConsumer`` on its server), as in a deployment of two functions. SIGTERM stops it
(the tracer provider flushes its spans on exit).
"""

from __future__ import annotations

import signal
import sys
import threading

from mlserve import QueueConsumer
from mlserve.monitoring.otel import setup_tracing
from tests.tracing.fn import fn


def main(endpoint: str) -> None:
    if not setup_tracing(endpoint, None, "queue-child"):
        raise SystemExit("tracing did not start")
    child = fn.to_mock_server(current_function="f2")
    QueueConsumer(child).start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print("consuming", flush=True)
    stopped.wait()
    child.wait_for_completion()


if __name__ == "__main__":
    main(sys.argv[1])
