"""``redis://host:port[/db]?stream=s``: records appended to a Redis Stream (XADD).

Each entry has one field, ``record``, holding the record's JSON. ``maxlen``
in ``stream_args`` caps the stream (approximately, as Redis trims).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from mlserve.protocol.tensors import dumps_strict

__all__ = ["RedisStream", "stream_address"]

DEFAULT_STREAM = "mlserve-model-logs"


def stream_address(url: str, stream: str | None = None) -> tuple[str, str]:
    """The stream of ``url`` (``stream``, else its ``?stream=``, else the default) and the
    address Redis is reached at (the URL without its query)."""
    parts = urlsplit(url)
    stream = stream or parse_qs(parts.query).get("stream", [DEFAULT_STREAM])[0] or DEFAULT_STREAM
    return stream, urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


class RedisStream:
    """A redis-py client; the connection is made (and remade) on demand by redis-py."""

    def __init__(
        self, url: str, stream: str | None = None, maxlen: int | None = None, **client_args: object
    ) -> None:
        import redis

        self.stream, address = stream_address(url, stream)
        self.maxlen = maxlen
        client_args.setdefault("socket_timeout", 5.0)
        client_args.setdefault("socket_connect_timeout", 5.0)
        self._client = redis.Redis.from_url(address, **client_args)

    def push(self, records: list[dict[str, Any]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for record in records:
            pipe.xadd(
                self.stream, {"record": dumps_strict(record)}, maxlen=self.maxlen, approximate=True
            )
        pipe.execute()

    def flush(self) -> None:
        """Every push is written when it returns."""

    def close(self) -> None:
        self._client.close()
