"""``dummy://name``: records kept in memory, for tests and the mock server."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

__all__ = ["MemoryStream", "get_stream"]

_streams: dict[str, MemoryStream] = {}
_lock = threading.Lock()


class MemoryStream:
    """Keeps every pushed record in ``records``; ``dummy://x`` opened twice is one stream."""

    def __new__(cls, url: str = "dummy://", **args: object) -> MemoryStream:
        parts = urlsplit(url)
        name = (parts.netloc + parts.path).strip("/")
        with _lock:
            stream = _streams.get(name)
            if stream is None:
                stream = super().__new__(cls)
                stream.name = name
                stream.records = []
                _streams[name] = stream
        return stream

    name: str
    records: list[dict[str, Any]]

    @property
    def event_list(self) -> list[dict[str, Any]]:
        """mlrun's name for what its dummy stream was pushed: the records."""
        return self.records

    def push(self, records: list[dict[str, Any]]) -> None:
        self.records.extend(records)

    def flush(self) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """The records stay readable after the server stops."""

    def clear(self) -> None:
        self.records.clear()


def get_stream(name: str = "") -> MemoryStream:
    """The memory stream ``dummy://name``; its ``records`` are what was pushed."""
    return MemoryStream(f"dummy://{name}")
