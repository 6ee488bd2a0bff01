"""Queue steps (``">>"`` or ``"$queue"``): where a flow hands events on.

Without a path a queue passes events through (one process runs both sides).
With a Kafka path it splits the graph between two functions: the root
function produces each event to the topic and answers ``{"id": ...}``; the
child function (``fn.add_child_function("f2")``, steps with
``function="f2"``) consumes the topic with a ``QueueConsumer``::

    graph.to(name="prep", handler="prep").to(">>", name="q", path="kafka://127.0.0.1:9092?topic=t")
    graph.add_step(name="score", handler="score", after="q", function="f2")

    child = fn.to_mock_server(current_function="f2")
    consumer = QueueConsumer(child).start()   # stopped by child.wait_for_completion()
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

from mlserve.core import tracing
from mlserve.core.aio import run_in_threadpool
from mlserve.core.context import GraphContext
from mlserve.core.events import Event, Trigger
from mlserve.graph.steps import BaseStep, step_kinds
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.tensors import dumps_lossless, loads

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

__all__ = ["KafkaTarget", "QueueConsumer", "QueueStep", "find_queue"]

logger = logging.getLogger("mlserve.graph")

SEND_TIMEOUT_SECONDS = 30.0


class KafkaTarget:
    """A Kafka topic and its brokers, from ``kafka://host:port[,host:port]?topic=t``
    (or ``kafka://host:port/t``), or a bare topic with ``kafka_brokers``."""

    def __init__(self, path: str, brokers: str | list[str] | None = None) -> None:
        if path.startswith("kafka://"):
            url = urlparse(path)
            topic = (parse_qs(url.query).get("topic") or [url.path.strip("/")])[0]
            brokers = url.netloc or brokers
        else:
            topic = path
        if not topic or not brokers:
            raise ValueError(f"a Kafka queue needs a topic and brokers, got path={path!r}")
        self.topic = topic
        self.brokers = brokers.split(",") if isinstance(brokers, str) else list(brokers)


@step_kinds.register
class QueueStep(BaseStep):
    """An in-memory pass-through, or a Kafka topic between two functions."""

    kind = "queue"
    fields = ("path", "shards", "retention_in_hours", "trigger_args", "options", *BaseStep.fields)

    def __init__(
        self,
        name: str | None = None,
        after: list[str] | None = None,
        path: str | None = None,
        shards: int | None = None,
        retention_in_hours: int | None = None,
        trigger_args: dict[str, Any] | None = None,
        function: str | None = None,
        **options: object,
    ) -> None:
        super().__init__(name, after)
        self.path = path
        self.shards = shards
        self.retention_in_hours = retention_in_hours
        self.trigger_args = trigger_args
        self.function = function
        self.options: dict[str, Any] = options
        self._producer: Any = None
        self._target: KafkaTarget | None = None

    def to(
        self, class_name: Any = None, name: str | None = None, handler: Any = None, **kwargs: object
    ) -> BaseStep:
        """The step after a queue runs in the function that reads it: it must name one."""
        if not kwargs.get("function"):
            name = name or getattr(class_name, "name", None) or class_name or handler
            raise ValueError(
                f"step '{name}' must specify a function, because it follows a queue step"
            )
        return super().to(class_name, name, handler, **kwargs)

    def target(self) -> KafkaTarget | None:
        """The Kafka topic of this queue; None for an in-memory queue."""
        if not self.path:
            return None
        return KafkaTarget(self.path, self.options.get("kafka_brokers"))

    def init_object(
        self,
        context: GraphContext,
        namespace: dict[str, Any] | None,
        mode: str = "sync",
        **kwargs: object,
    ) -> None:
        super().init_object(context, namespace, mode)
        self._target = self.target()
        if self._target is not None:
            from mlserve.core.kafka_config import confluent, producer_config

            self._producer = confluent().Producer(
                producer_config(
                    ",".join(self._target.brokers), **self.options.get("producer_options", {})
                )
            )

    def run(self, event: Event) -> Event:
        if self._target is None:
            return event
        record = {"id": event.id, "body": event.body, "path": event.path}
        errors: list[KafkaError] = []

        def on_delivery(error: KafkaError | None, _message: object) -> None:
            if error:
                errors.append(error)

        topic = self._target.topic
        if tracing.on:  # a ``queue {topic}`` producer span; the record carries its traceparent
            attributes = {"messaging.system": "kafka", "messaging.destination.name": topic}
            with tracing.span(f"queue {topic}", attributes, kind="producer"):
                headers: dict[str, str] = {}
                tracing.inject(headers)
                self._producer.produce(
                    topic,
                    dumps_lossless(record),
                    headers=[(name, value.encode("latin-1")) for name, value in headers.items()],
                    on_delivery=on_delivery,
                )
                flushed = self._producer.flush(SEND_TIMEOUT_SECONDS)
        else:
            self._producer.produce(topic, dumps_lossless(record), on_delivery=on_delivery)
            flushed = self._producer.flush(SEND_TIMEOUT_SECONDS)
        if flushed or errors:
            raise RuntimeError(f"queue '{self.name}': event not delivered: {errors or 'timeout'}")
        event.terminated = True
        event.body = {"id": event.id}
        return event

    async def run_async(self, event: Event) -> Event:
        if self._target is None:
            return event
        return await run_in_threadpool(self.run, event)

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(SEND_TIMEOUT_SECONDS)


def find_queue(graph: object, function: str | None) -> QueueStep:
    """The Kafka queue that feeds ``function``'s steps in ``graph``."""
    steps = getattr(graph, "steps", {})
    for step in steps.values():
        if step.function != function:
            continue
        for name in step.after:
            queue = steps.get(name)
            if isinstance(queue, QueueStep) and queue.path:
                return queue
    raise ValueError(f"no Kafka queue feeds the steps of function '{function}'")


class QueueConsumer:
    """Feeds a child function's server from its queue's topic, in a background thread.

    It consumes as a member of a consumer group (``group``, else the queue's
    ``trigger_args["consumerGroup"]``, else ``mlserve-<queue>``), so N copies of
    the child function split the topic's partitions. Each record runs through
    ``server.run`` as an event with trigger kind ``"kafka"``; a batch's offsets
    are committed once its records have run (at-least-once).
    """

    def __init__(
        self,
        server: Any,
        queue: QueueStep | None = None,
        poll_ms: int = 200,
        group: str | None = None,
    ) -> None:
        self.server = server
        queue = queue or find_queue(server.graph, server.current_function)
        target = queue.target()
        if target is None:
            raise ValueError(f"queue '{queue.name}' has no Kafka path")
        self.target = target
        trigger_args = queue.trigger_args or {}
        self.group = group or trigger_args.get("consumerGroup") or f"mlserve-{queue.name}"
        self.poll_ms = poll_ms
        self.processed = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> QueueConsumer:
        from mlserve.core.kafka_config import confluent, consumer_config

        consumer = confluent().Consumer(consumer_config(",".join(self.target.brokers), self.group))
        consumer.subscribe([self.target.topic])
        self._thread = threading.Thread(
            target=self._loop, args=(consumer,), daemon=True, name=f"queue-{self.target.topic}"
        )
        self._thread.start()
        self.server.on_shutdown(self.stop)
        return self

    def _loop(self, consumer: Any) -> None:
        try:
            while not self._stop.is_set():
                records = consumer.consume(100, timeout=self.poll_ms / 1000)
                handled = [r for r in records if r.error() is None]
                for record in handled:
                    self._handle(record)
                    consumer.store_offsets(message=record)
                if handled:
                    self._commit(consumer)
        finally:
            consumer.close()  # leaves the group: the other copies take the partitions

    def _commit(self, consumer: Any) -> None:
        from mlserve.core.kafka_config import confluent

        try:
            consumer.commit(asynchronous=False)
        except confluent().KafkaException as exc:  # e.g. the group rebalanced meanwhile
            logger.warning("queue commit failed (%s): the partitions' next owner reruns", exc)

    def _handle(self, record: Any) -> None:
        try:
            data = loads(record.value() or b"")
        except (InvalidInput, ValueError):
            data = None
        if not isinstance(data, dict):  # not a record of a queue step: counted, not fatal
            self.failed += 1
            logger.error("queue record at offset %s is not a queue record", record.offset())
            return
        event = Event(
            body=data.get("body"),
            path=data.get("path") or "/",
            event_id=data.get("id"),
            trigger=Trigger("kafka", self.target.topic),
            offset=record.offset(),
        )
        if tracing.on:  # the producer's trace goes on (docs/observability.md#tracing)
            headers = {name: value for name, value in record.headers() or []}
            attributes = {
                "messaging.system": "kafka",
                "messaging.destination.name": self.target.topic,
                "messaging.kafka.offset": record.offset(),
            }
            name = f"{self.target.topic} process"
            with tracing.server_span(name, headers, attributes, kind="consumer"):
                response = self.server.run(event, get_body=True)
        else:
            response = self.server.run(event, get_body=True)
        self.processed += 1
        status = getattr(response, "status_code", 200)
        if status >= 300:
            self.failed += 1
            logger.error("queue event %s failed (%s): %s", event.id, status, response.body)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
