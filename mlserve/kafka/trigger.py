"""The Kafka trigger: a consumer-group member that runs each message through the graph.

As nuclio's kafka-cluster trigger: the message value is the request body, its
key is ``event.key``, its headers are ``event.headers`` (a ``content-type``
header sets the content type), and the path is ``/`` so the body routes.

Delivery is at-least-once. Messages are read in batches; each result is
produced to the output topic with the input's key and headers (plus
``mlserve-source``: ``topic/partition/offset`` of the input), and a partition's offset
is committed (synchronously) only once every result of the batch from that
partition has its delivery report. A partition whose delivery failed is not
committed and is rewound, so its messages run again. A member that dies
before committing leaves its batch to the member that takes its partitions
over: results may be duplicated, never missing.

Failures: a 4xx (the message is malformed or the model refuses it) goes at
once to the dead-letter topic; a 5xx (the model failing or not loaded) is
retried ``retries`` times with doubling backoff, then dead-lettered. The
dead-letter message keeps the input's value, key and headers and adds
``mlserve-status``, ``mlserve-error`` (the error body) and ``mlserve-source``
(``topic/partition/offset``). Nothing is retried forever and nothing is
dropped: a dead-letter message counts as the message's result.

A streamed answer (a ChunkStream: a message that asks a streaming model for
``infer_stream``, or a flow whose answer streams) is produced one message per
chunk as the chunks come, then a final marker; or, with ``stream_output``
"joined", as one message (docs/deployment.md#streamed-answers).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mlserve.core import tracing
from mlserve.core.events import Event, Response, Trigger
from mlserve.core.kafka_config import confluent, consumer_config, producer_config
from mlserve.core.streams import ChunkStream
from mlserve.kafka import metrics
from mlserve.server.graph_server import encode_response

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from prometheus_client import Counter

    from mlserve.server.graph_server import GraphServer

__all__ = ["STREAM_OUTPUTS", "KafkaTrigger", "TriggerOptions", "traced_headers"]

logger = logging.getLogger("mlserve.kafka")

DELIVERY_WAIT_SECONDS = 30.0

# How a streamed answer is produced: a message per chunk and a final marker, or one message.
STREAM_OUTPUTS = ("chunks", "joined")

# The headers of a streamed answer's messages (docs/deployment.md#streamed-answers).
SEQ_HEADER = "mlserve-seq"
REQUEST_ID_HEADER = "mlserve-request-id"
FINAL_HEADER = "mlserve-final"
STREAMED_HEADER = "mlserve-streamed"


class Message(Protocol):
    """A consumed ``confluent_kafka.Message``, as a consumer without deserializers
    hands it over (bytes, a partition and an offset: its stubs allow more)."""

    def error(self) -> KafkaError | None: ...

    def topic(self) -> str: ...

    def partition(self) -> int: ...

    def offset(self) -> int: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def headers(self) -> list[tuple[str, bytes]] | None: ...


@dataclass
class TriggerOptions:
    """What ``mlserve serve --kafka`` sets; ``consumer``/``producer`` are librdkafka properties."""

    topic: str
    brokers: str
    group: str
    output_topic: str | None = None
    dead_letter_topic: str | None = None
    batch_size: int = 200
    retries: int = 3
    backoff_seconds: float = 0.5
    consumer: dict[str, Any] = field(default_factory=dict)
    producer: dict[str, Any] = field(default_factory=dict)
    stream_output: str = "chunks"  # a streamed answer: "chunks" or "joined" (STREAM_OUTPUTS)

    def __post_init__(self) -> None:
        self.dead_letter_topic = self.dead_letter_topic or f"{self.topic}-dead-letter"
        if self.stream_output not in STREAM_OUTPUTS:
            raise ValueError(
                f"stream_output is one of {', '.join(STREAM_OUTPUTS)}, not {self.stream_output!r}"
            )


class KafkaTrigger:
    """Consumes ``options.topic`` as a member of ``options.group`` into ``server``."""

    def __init__(
        self,
        server: GraphServer,
        options: TriggerOptions,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.server = server
        self.options = options
        self.error: BaseException | None = None
        self.on_failure = on_failure  # called if consuming stops on an error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed_partitions: set[int] = set()
        self._consumer: Any = None
        self._producer: Any = None
        # A batch ends in time for the next poll (librdkafka leaves the group past
        # max.poll.interval.ms): half of it, so slow or retried calls stay members.
        poll_interval = float(options.consumer.get("max.poll.interval.ms", 300000)) / 1000
        self._batch_seconds = poll_interval / 2

    # ---- lifecycle ----------------------------------------------------------------

    def start(self) -> KafkaTrigger:
        """Consume in a background thread; ``stop()`` drains and leaves the group."""
        self._connect()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kafka-trigger")
        self._thread.start()
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """Stop fetching, finish the batch in flight, commit, leave the group."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _connect(self) -> None:
        kafka = confluent()
        options = self.options
        self._consumer = kafka.Consumer(
            consumer_config(
                options.brokers,
                options.group,
                **{"statistics.interval.ms": 1000, "stats_cb": _record_lag, **options.consumer},
            )
        )
        self._producer = kafka.Producer(producer_config(options.brokers, **options.producer))
        self._consumer.subscribe([options.topic], on_revoke=_forget_lag)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                messages = self._consumer.consume(self.options.batch_size, timeout=0.5)
                if messages:
                    self._handle_batch(messages)
        except BaseException as exc:  # the process reports it and exits non-zero
            self.error = exc
            logger.exception("the Kafka trigger stopped")
        finally:
            self._producer.flush(DELIVERY_WAIT_SECONDS)
            self._consumer.close()  # leaves the group: its partitions move at once
        if self.error is not None:
            self.on_failure()

    # ---- one batch ------------------------------------------------------------------

    def _handle_batch(self, messages: list[Message]) -> None:
        """Run, produce, wait for the delivery reports, commit. Messages not started when
        the batch's time is up (or at stop) are read again rather than committed."""
        topic = self.options.topic
        first: dict[int, int] = {}  # per partition: the batch's first offset,
        last: dict[int, int] = {}  # the last one handled,
        rewind: dict[int, int] = {}  # the first one left for the next fetch
        self._failed_partitions.clear()
        deadline = time.monotonic() + self._batch_seconds
        for message in messages:
            if message.error() is not None:
                logger.warning("Kafka consume error: %s", message.error())
                continue
            partition = message.partition()
            first.setdefault(partition, message.offset())
            if partition in rewind or self._stop.is_set() or time.monotonic() > deadline:
                rewind.setdefault(partition, message.offset())
                continue
            metrics.CONSUMED.labels(topic).inc()
            last[partition] = message.offset()
            if tracing.on:
                self._traced_handle(message)
            else:
                self._handle(message)
        self._producer.flush(DELIVERY_WAIT_SECONDS)
        if len(self._producer):
            self._failed_partitions.update(last)  # no report in time: run them all again
        for partition in self._failed_partitions:
            rewind[partition] = first[partition]
        self._commit(last, rewind)

    def _commit(self, last: dict[int, int], rewind: dict[int, int]) -> None:
        TopicPartition = confluent().TopicPartition  # noqa: N806
        topic = self.options.topic
        done = [
            TopicPartition(topic, p, offset + 1)
            for p, offset in last.items()
            if p not in self._failed_partitions
        ]
        if done:
            try:
                self._consumer.commit(offsets=done, asynchronous=False)
            except confluent().KafkaException as exc:  # e.g. the group rebalanced meanwhile
                logger.warning("commit failed (%s): the partitions' next owner reads them", exc)
        for partition, offset in rewind.items():
            if partition in self._failed_partitions:
                logger.warning(
                    "results of %s/%d not delivered: reading them again", topic, partition
                )
            if not self._stop.is_set():  # (at stop the group's next owner reads them)
                self._consumer.seek(TopicPartition(topic, partition, offset))

    def _traced_handle(self, message: Message) -> None:
        """``_handle`` in a ``{topic} process`` consumer span continuing the message's
        ``traceparent`` header (docs/observability.md#tracing)."""
        headers = {name: _text(value) for name, value in message.headers() or []}
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation": "process",
            "messaging.destination.name": message.topic(),
            "messaging.destination.partition.id": str(message.partition()),
            "messaging.kafka.offset": message.offset(),
            "messaging.consumer.group.name": self.options.group,
        }
        key = message.key()
        if key is not None:
            attributes["messaging.kafka.message.key"] = _text(key)
        name = f"{message.topic()} process"
        with tracing.server_span(name, headers, attributes, kind="consumer"):
            self._handle(message)

    def _handle(self, message: Message) -> None:
        options = self.options
        response = self._answer(message)
        source = f"{message.topic()}/{message.partition()}/{message.offset()}"
        if response.status_code < 400:
            headers = [("mlserve-source", source.encode())]
            if isinstance(response.body, ChunkStream):
                headers.append((REQUEST_ID_HEADER, response.headers[REQUEST_ID_HEADER].encode()))
                self._produce_chunks(message, response.body, headers, source)
                return
            if STREAMED_HEADER in response.headers:  # a streamed answer, joined
                headers.append((STREAMED_HEADER, b"1"))
            if options.output_topic:
                self._produce(
                    options.output_topic, message, response.body, headers, metrics.PRODUCED
                )
            return
        metrics.FAILED.labels(options.topic, str(response.status_code)).inc()
        error = response.body if isinstance(response.body, bytes) else str(response.body).encode()
        logger.warning("message %s failed (%d): dead-lettered", source, response.status_code)
        headers = [
            ("mlserve-status", str(response.status_code).encode()),
            ("mlserve-error", error),
            ("mlserve-source", source.encode()),
        ]
        assert options.dead_letter_topic is not None
        self._produce(
            options.dead_letter_topic, message, message.value(), headers, metrics.DEAD_LETTERED
        )

    def _answer(self, message: Message) -> Response:
        """The graph's answer, a 5xx retried with doubling backoff."""
        delay = self.options.backoff_seconds
        for attempt in range(self.options.retries + 1):
            response = self._respond(message)
            if response.status_code < 500 or attempt == self.options.retries:
                return response
            metrics.RETRIED.labels(self.options.topic).inc()
            logger.warning("graph answered %d: retry in %.1fs", response.status_code, delay)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _respond(self, message: Message) -> Response:
        """The graph's answer to one message: a Response whose body is bytes, or, for a
        streamed answer produced chunk by chunk, its ChunkStream (headers: the request's
        id). A joined stream is read here, so that its failure is retried as any."""
        event = to_event(message)
        response = self.server.answer(event)
        stream = response.body
        if not isinstance(stream, ChunkStream):
            return encode_response(response)
        if self.options.stream_output == "chunks":
            return Response(stream, headers={REQUEST_ID_HEADER: event.id})
        try:
            chunks = list(self.server.read_stream(stream))
        except Exception as exc:
            return encode_response(self.server.error_response(exc))
        joined = encode_response(Response(chunks))
        joined.headers = {STREAMED_HEADER: "1"}
        return joined

    def _produce_chunks(
        self, message: Message, stream: ChunkStream, headers: list[tuple[str, bytes]], source: str
    ) -> None:
        """Each chunk as one message as it comes (header ``mlserve-seq``), then the final
        marker: an empty value, ``mlserve-final``, the chunk count as its ``mlserve-seq``,
        and when the stream failed, its ``mlserve-status`` and ``mlserve-error``. Without
        an output topic the stream is still read to its end (the model's own work)."""
        topic = self.options.output_topic
        marker = [(FINAL_HEADER, b"1")]
        seq = 0
        try:
            for chunk in self.server.read_stream(stream):
                if topic:
                    value = encode_response(Response(chunk)).body
                    seq_header = (SEQ_HEADER, str(seq).encode())
                    self._produce(topic, message, value, [*headers, seq_header], metrics.PRODUCED)
                seq += 1
        except Exception as exc:  # the model's, or a stream timeout: the marker tells
            failure = encode_response(self.server.error_response(exc))
            status = failure.status_code
            metrics.FAILED.labels(self.options.topic, str(status)).inc()
            logger.warning(
                "message %s: its stream failed after %d chunks (%d)", source, seq, status
            )
            marker += [("mlserve-status", str(status).encode()), ("mlserve-error", failure.body)]
        if topic:
            marker.append((SEQ_HEADER, str(seq).encode()))
            self._produce(topic, message, b"", [*headers, *marker], metrics.PRODUCED)

    def _produce(
        self,
        topic: str,
        message: Message,
        value: bytes | None,
        extra_headers: list[tuple[str, bytes]],
        counter: Counter,
    ) -> None:
        headers = [*(message.headers() or []), *extra_headers]
        on_delivery = self._on_delivery(message.partition(), counter.labels(topic).inc)
        if tracing.on:  # a ``{topic} publish`` span; the message carries its traceparent
            attributes = {
                "messaging.system": "kafka",
                "messaging.operation": "publish",
                "messaging.destination.name": topic,
            }
            with tracing.span(f"{topic} publish", attributes, kind="producer"):
                self._send(topic, message, value, traced_headers(headers), on_delivery)
            return
        self._send(topic, message, value, headers, on_delivery)

    def _send(
        self,
        topic: str,
        message: Message,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        on_delivery: Callable[..., None],
    ) -> None:
        while True:
            try:
                self._producer.produce(
                    topic, value, message.key(), headers=headers, on_delivery=on_delivery
                )
                return
            except BufferError:  # librdkafka's queue is full: let it send
                self._producer.poll(0.1)

    def _on_delivery(self, partition: int, delivered: Callable[[], None]) -> Callable[..., None]:
        def report(error: KafkaError | None, _message: object) -> None:
            if error is None:
                delivered()
            else:
                logger.warning("Kafka delivery failed: %s", error)
                self._failed_partitions.add(partition)

        return report


def to_event(message: Message) -> Event:
    """A Kafka message as the graph's Event: value → body, key, headers; path ``/``."""
    headers = {name: _text(value) for name, value in message.headers() or []}
    content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
    event = Event(
        body=message.value(),
        content_type=content_type,
        headers=headers,
        method="POST",
        path="/",  # a stream has no URL: the body routes
        trigger=Trigger("kafka-cluster", message.topic()),
        offset=message.offset(),
    )
    key = message.key()
    event.key = _text(key) if key is not None else None
    return event


def traced_headers(headers: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``headers`` with the current span's ``traceparent`` (and ``tracestate``) in place
    of the input's."""
    current: dict[str, str] = {}
    tracing.inject(current)
    kept = [(name, value) for name, value in headers if name.lower() not in _TRACE_HEADERS]
    return kept + [(name, value.encode("latin-1")) for name, value in current.items()]


_TRACE_HEADERS = frozenset({"traceparent", "tracestate"})


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", "replace") if value is not None else ""


def _record_lag(stats: str) -> None:
    """librdkafka's statistics: each owned partition's ``consumer_lag``."""
    for topic, data in json.loads(stats).get("topics", {}).items():
        for partition, part in data.get("partitions", {}).items():
            lag = part.get("consumer_lag", -1)
            if partition != "-1" and lag >= 0:
                metrics.LAG.labels(topic, partition).set(lag)


def _forget_lag(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    for tp in partitions:
        try:
            metrics.LAG.remove(tp.topic, str(tp.partition))
        except KeyError:
            pass
