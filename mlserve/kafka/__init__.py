"""The Kafka face: ``mlserve serve <function> --kafka TOPIC@BROKERS --group G``.

A sibling of the HTTP and gRPC faces: it turns each message of a topic into
an Event for the GraphServer, as a member of a consumer group, so several
processes (or pods scaled by KEDA) share the topic's partitions.
"""

from __future__ import annotations

from mlserve.core.kafka_config import parse_source
from mlserve.kafka.trigger import KafkaTrigger, TriggerOptions, to_event

__all__ = ["KafkaTrigger", "TriggerOptions", "parse_source", "to_event"]
