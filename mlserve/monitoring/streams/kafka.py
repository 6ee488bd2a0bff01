"""``kafka://host:port[,host:port]?topic=t``: records produced to a Kafka topic.

The topic is created by producing to it (brokers that auto-create topics,
tansu included). Records are keyed by model name, so one model's records keep
their order in one partition; ``max_in_flight_requests_per_connection=1``
keeps it across retries. A failed send closes the producer and raises; the
pusher retries the whole push (at-least-once).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from mlserve.protocol.tensors import dumps

__all__ = ["KafkaStream"]

DEFAULT_TOPIC = "mlserve-model-logs"
SEND_TIMEOUT = 10.0


class KafkaStream:
    """A kafka-python producer; ``stream_args`` are producer options."""

    def __init__(self, url: str, topic: str | None = None, **producer_args: Any) -> None:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.bootstrap = parts.netloc
        self.topic = topic or query.get("topic", [DEFAULT_TOPIC])[0] or DEFAULT_TOPIC
        self.producer_args = {
            "linger_ms": 5,
            "max_block_ms": 5000,
            "request_timeout_ms": 5000,
            "delivery_timeout_ms": 10000,
            "retries": 2,
            "max_in_flight_requests_per_connection": 1,
            **producer_args,
        }
        self._producer: Any = None

    def _connect(self) -> Any:
        from kafka import KafkaProducer

        self._producer = KafkaProducer(
            bootstrap_servers=self.bootstrap.split(","), **self.producer_args
        )
        return self._producer

    def push(self, records: list[dict[str, Any]]) -> None:
        producer = self._producer or self._connect()
        try:
            futures = [
                producer.send(self.topic, value=dumps(record), key=_key(record))
                for record in records
            ]
            producer.flush(SEND_TIMEOUT)
            for future in futures:
                future.get(SEND_TIMEOUT)
        except Exception:
            self.close()
            raise

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush(SEND_TIMEOUT)

    def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer.close(timeout=0)


def _key(record: dict[str, Any]) -> bytes:
    return str(record.get("model", "")).encode()
