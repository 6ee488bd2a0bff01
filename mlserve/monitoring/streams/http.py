"""``http(s)://host[:port]/path``: each record POSTed as JSON.

One kept-alive connection; any status of 300 or more, or a broken
connection, fails the push (the pusher retries it).
"""

from __future__ import annotations

import http.client
from typing import Any
from urllib.parse import urlsplit

from mlserve.protocol.tensors import dumps_strict

__all__ = ["HttpStream"]


class HttpStream:
    """POSTs records to ``url``; ``headers`` in ``stream_args`` are added to each request."""

    def __init__(
        self, url: str, headers: dict[str, str] | None = None, timeout: float = 5.0
    ) -> None:
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._netloc = parts.netloc
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._netloc, timeout=self._timeout)
        return self._conn

    def push(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            self._post(dumps_strict(record))

    def _post(self, body: bytes) -> None:
        conn = self._connection()
        try:
            conn.request("POST", self._path, body=body, headers=self._headers)
            response = conn.getresponse()
            response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        if response.status >= 300:
            raise ConnectionError(f"POST {self._netloc}{self._path} answered {response.status}")

    def flush(self) -> None:
        """Every push is sent when it returns."""

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
