"""Stream targets of the model-log stream, chosen by URL scheme
(docs/monitoring.md#targets).

A target is a small class with ``push(records)``, ``flush()`` and ``close()``;
``push`` raises when the target cannot take the records, and the pusher
retries them. A target may also have ``push_json(lines, keys)``: the pusher
then hands it records already encoded as strict JSON bytes (one ``orjson`` pass:
NaN and infinities as null, docs/monitoring.md#records),
with their model names as bytes (keys), instead of dicts; a target that sets
``uses_keys = False`` gets an empty list of keys (the pusher keeps none).

Targets are registered by scheme in a registry that rejects duplicates; each
module is imported only when a URL of its scheme is opened::

    stream_registry.register("mystream", "mypkg.streams:MyStream")
    target = open_stream("mystream://host/x", **stream_args)
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol
from urllib.parse import urlsplit

__all__ = [
    "JsonStreamTarget",
    "StreamRegistry",
    "StreamTarget",
    "open_stream",
    "stream_registry",
]


class StreamTarget(Protocol):
    def push(self, records: list[dict[str, Any]]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class JsonStreamTarget(StreamTarget, Protocol):
    """A target that also takes records encoded already (one JSON line each)."""

    def push_json(self, lines: list[bytes], keys: list[bytes]) -> None: ...


class StreamRegistry:
    """Stream target classes by URL scheme: ``"module:Class"`` references or classes."""

    def __init__(self) -> None:
        self._targets: dict[str, Any] = {}

    def register(self, scheme: str, target: object) -> None:
        if scheme in self._targets:
            raise ValueError(f"a stream target is already registered for '{scheme}://'")
        self._targets[scheme] = target

    def get(self, scheme: str) -> Any:
        target = self._targets.get(scheme)
        if target is None:
            known = ", ".join(f"{s}://" for s in sorted(self._targets))
            raise ValueError(f"no stream target for '{scheme}://' (known: {known})")
        if isinstance(target, str):
            module, _, name = target.partition(":")
            target = getattr(importlib.import_module(module), name)
        return target

    def open(self, url: str, **args: object) -> StreamTarget:
        """A target for ``url``; a plain path (no scheme) is a file."""
        scheme = urlsplit(url).scheme if "://" in url else "file"
        return self.get(scheme)(url, **args)


stream_registry = StreamRegistry()
for _scheme, _target in (
    ("dummy", "mlserve.monitoring.streams.memory:MemoryStream"),
    ("file", "mlserve.monitoring.streams.file:FileStream"),
    ("kafka", "mlserve.monitoring.streams.kafka:KafkaStream"),
    ("redis", "mlserve.monitoring.streams.redis:RedisStream"),
    ("http", "mlserve.monitoring.streams.http:HttpStream"),
    ("https", "mlserve.monitoring.streams.http:HttpStream"),
):
    stream_registry.register(_scheme, _target)


def open_stream(url: str, **args: object) -> StreamTarget:
    """Open the stream target of ``url`` (see :class:`StreamRegistry`)."""
    return stream_registry.open(url, **args)
