"""``kafka://host:port[,host:port]?topic=t``: records produced to a Kafka topic.

The producer is confluent-kafka (librdkafka, C), not kafka-python: a
``produce()`` costs a few microseconds of Python, and batching, sending and
retrying run in librdkafka's own threads without the GIL. kafka-python spent
about 40 µs of Python per message, which on a small machine took a third of
the serving thread's CPU (docs/monitoring.md, "Performance").

Delivery is at-least-once: ``acks=all`` and every delivery report checked.
The topic is created by producing to it (brokers that auto-create topics,
tansu included). Records are keyed by model name, so one model's records keep
their order in one partition; ``max.in.flight.requests.per.connection=1``
keeps it across librdkafka's own retries (idempotence is not asked for: tansu
has it, but not every Kafka-protocol broker does). ``push`` waits (without the GIL) until
every record has its delivery report (only failures call back into Python:
``delivery.report.only.error``); when any failed or did not come in
time, what is still queued is purged and ``push`` raises, and the pusher
retries the whole push (at-least-once).

``stream_args`` are librdkafka producer properties (``{"linger.ms": 20}``);
librdkafka's log lines go to the ``mlserve.monitoring.kafka`` logger.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs, urlsplit

from mlserve.protocol.tensors import dumps_strict

__all__ = ["KafkaStream"]

DEFAULT_TOPIC = "mlserve-model-logs"
DEFAULTS: dict[str, Any] = {
    "acks": "all",  # at-least-once: a record counts as delivered once every replica has it
    "linger.ms": 5,
    "message.timeout.ms": 10000,
    "socket.timeout.ms": 5000,
    "max.in.flight.requests.per.connection": 1,
    "enable.idempotence": False,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
    "delivery.report.only.error": True,  # no Python call per delivered record
}
GRACE_SECONDS = 2.0  # past message.timeout.ms, for the last delivery reports


class KafkaDeliveryError(RuntimeError):
    """Some records of a push were not delivered."""


class KafkaStream:
    """A confluent-kafka producer; ``stream_args`` are librdkafka producer properties."""

    def __init__(self, url: str, topic: str | None = None, **producer_args: Any) -> None:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.bootstrap = parts.netloc
        self.topic = topic or query.get("topic", [DEFAULT_TOPIC])[0] or DEFAULT_TOPIC
        self.config = {
            **DEFAULTS,
            "logger": logging.getLogger("mlserve.monitoring.kafka"),
            **producer_args,
            "on_delivery": self._delivered,
            "bootstrap.servers": self.bootstrap,
        }
        timeout = self.config.get("delivery.timeout.ms", self.config["message.timeout.ms"])
        self._wait = float(timeout) / 1000 + GRACE_SECONDS  # (the alias, set later, wins)
        self._producer: Any = None
        self._errors: list[Any] = []

    def _connect(self) -> Any:
        from confluent_kafka import Producer

        self._producer = Producer(self.config)
        return self._producer

    def _delivered(self, error: object, message: object) -> None:
        if error is not None:
            self._errors.append(error)

    def push(self, records: list[dict[str, Any]]) -> None:
        self.push_json([dumps_strict(record) for record in records], [_key(r) for r in records])

    def push_json(self, values: list[bytes], keys: list[bytes]) -> None:
        """Records already encoded (by the pusher), keyed by model name."""
        producer = self._producer or self._connect()
        self._errors.clear()
        produce, topic = producer.produce, self.topic
        try:
            for value, key in zip(values, keys, strict=True):
                produce(topic, value, key)
        except BufferError as exc:  # librdkafka's own queue is full
            self._give_up(producer)
            raise KafkaDeliveryError(f"producer queue full: {exc}") from exc
        if producer.flush(self._wait) or self._errors:
            self._give_up(producer)
            first = self._errors[0] if self._errors else "no delivery report in time"
            raise KafkaDeliveryError(f"{len(self._errors) or len(values)} not delivered: {first}")

    def _give_up(self, producer: Any) -> None:
        """Drop what is still queued, so a retried push does not race it."""
        producer.purge()
        producer.flush(0)

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush(self._wait)

    def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer.flush(0)


def _key(record: dict[str, Any]) -> bytes:
    return str(record.get("model", "")).encode()
