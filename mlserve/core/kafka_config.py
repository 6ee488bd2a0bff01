"""librdkafka settings shared by every Kafka consumer and producer of mlserve.

One client library (confluent-kafka) for the Kafka face, the graph's queues
and the monitoring stream. The group settings make a member join and take
over a dead member's partitions in seconds: librdkafka's defaults (45 s
session) made a first join on the tansu broker take over 20 s, because the
coordinator waits a session for members of the previous generation.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GROUP_DEFAULTS",
    "PRODUCER_DEFAULTS",
    "confluent",
    "consumer_config",
    "parse_source",
    "producer_config",
]

GROUP_DEFAULTS: dict[str, Any] = {
    "session.timeout.ms": 6000,  # a killed member's partitions move after at most this
    "heartbeat.interval.ms": 500,
    "enable.auto.commit": False,  # offsets are committed after the result is delivered
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",  # a new group reads what was produced before it joined
    "topic.metadata.refresh.interval.ms": 5000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
}
PRODUCER_DEFAULTS: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 5,
    "message.timeout.ms": 10000,
    "enable.idempotence": False,  # not every Kafka-protocol broker has it
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 1000,
}


def consumer_config(brokers: str, group: str, **extra: object) -> dict[str, Any]:
    """A consumer-group member's librdkafka properties (``extra`` wins)."""
    return {**GROUP_DEFAULTS, **extra, "bootstrap.servers": brokers, "group.id": group}


def producer_config(brokers: str, **extra: object) -> dict[str, Any]:
    """A producer's librdkafka properties (``extra`` wins)."""
    return {**PRODUCER_DEFAULTS, **extra, "bootstrap.servers": brokers}


def parse_source(source: str) -> tuple[str, str]:
    """``TOPIC@HOST:PORT[,HOST:PORT]`` → (topic, brokers), as ``--kafka`` takes it."""
    topic, sep, brokers = source.partition("@")
    if not sep or not topic or not brokers:
        raise ValueError(
            f"--kafka takes TOPIC@BROKERS (e.g. requests@127.0.0.1:9092), got {source!r}"
        )
    return topic, brokers


def confluent() -> Any:
    """The confluent_kafka module, or an error naming the extra that installs it."""
    try:
        import confluent_kafka
    except ImportError as exc:
        raise ImportError("Kafka needs confluent-kafka: pip install 'mlserve[kafka]'") from exc
    return confluent_kafka
