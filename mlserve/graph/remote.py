"""``RemoteModel``: a route served by a remote V2 endpoint
(``fn.add_model(key, model_url="http://host:port[/v2/models/<m>]")``).

The event is forwarded as is (binary tensor data kept binary) and the
remote answer, status included, comes back unchanged.

The flow steps that call HTTP services (``RemoteStep``, ``BatchHttpRequests``)
live in ``mlserve.graph.http_steps`` and are importable from here, where mlrun
users find them (``mlrun.serving.remote``).
"""

from __future__ import annotations

import http.client
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from mlserve.core import tracing
from mlserve.core.aio import run_in_threadpool
from mlserve.core.events import Event, Response
from mlserve.graph.http_steps import BatchHttpRequests, RemoteStep, event_id_key, event_path_key
from mlserve.model import V2ModelServer
from mlserve.protocol.errors import ModelNotReady
from mlserve.protocol.tensors import (
    BINARY_HEADER,
    RAW,
    dumps_lossless,
    join_binary_body,
    loads,
    split_binary_body,
)

__all__ = [
    "BatchHttpRequests",
    "RemoteModel",
    "RemoteStep",
    "event_id_key",
    "event_path_key",
]


class RemoteModel(V2ModelServer):
    """Forwards each request to ``url``: a model's URL, or a server's (the route
    key then names the model). One keep-alive connection per worker thread."""

    def __init__(
        self,
        context: Any = None,
        name: str | None = None,
        url: str = "",
        timeout: float = 60.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(context, name, **kwargs)
        self.url = url.rstrip("/")
        self.timeout = timeout
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"model_url must be an http(s) URL, got {url!r}")
        self._https = parts.scheme == "https"
        self._netloc = (parts.hostname, parts.port)
        self._prefix = parts.path if "/models/" in parts.path else self._model_prefix(parts.path)
        self._local = threading.local()
        self._mark_ready()

    def _model_prefix(self, base: str) -> str:
        version = f"/versions/{self.version}" if self.version else ""
        return f"{base}/v2/models/{self.name}{version}"

    def to_class_args(self) -> dict[str, Any]:
        return {**super().to_class_args(), "url": self.url, "timeout": self.timeout}

    async def do_event_async(self, event: Event) -> Event:
        return await run_in_threadpool(self.do_event, event)

    def do_event(self, event: Event, *args: object, **kwargs: object) -> Event:
        """Forward the event; its body becomes the remote answer."""
        op = (event.path or "").strip("/")
        path = f"{self._prefix}/{op}" if op else self._prefix
        started = time.perf_counter_ns()
        body, headers = _encode(event.body)
        if tracing.on:  # a client span, its traceparent sent (docs/observability.md#tracing)
            status, answer = self._traced_send(event.method, path, body, headers)
        else:
            status, answer = self._send(event.method, path, body, headers)
        if event.method != "GET":
            self.stats.record_inference(status < 300, time.perf_counter_ns() - started)
        event.body = answer if status < 300 else Response(answer, status_code=status)
        return event

    def _connection(self, fresh: bool = False) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(*self._netloc, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _traced_send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, Any]:
        """``_send`` in a ``remote {url}`` client span whose context the remote continues."""
        host, port = self._netloc
        attributes = {
            "http.request.method": method,
            "url.full": f"{'https' if self._https else 'http'}://{host}"
            + (f":{port}" if port else "")
            + path,
            "server.address": host,
            "mlserve.model": self.name,
        }
        with tracing.span(f"remote {self.url}", attributes, kind="client") as current:
            headers = dict(headers)
            tracing.inject(headers)
            status, answer = self._send(method, path, body, headers)
            tracing.set_status(current, status)
        return status, answer

    def _send(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, Any]:
        for attempt in (0, 1):  # a kept-alive connection the remote closed is retried once
            conn = self._connection(fresh=attempt == 1)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                if attempt == 1:
                    raise ModelNotReady(f"remote model {self.url} is unreachable: {exc}") from exc
        header_length = response.getheader(BINARY_HEADER)
        if header_length is not None:
            return response.status, split_binary_body(data, int(header_length))
        if (response.getheader("content-type") or "").startswith("application/json"):
            return response.status, loads(data)
        return response.status, data


def _encode(body: object) -> tuple[bytes | None, dict[str, str]]:
    if body is None:
        return None, {}
    if isinstance(body, bytes | bytearray):
        return bytes(body), {}
    if isinstance(body, dict) and any(
        isinstance(o, dict) and RAW in o for o in body.get("inputs") or ()
    ):
        data, header_length = join_binary_body(body)
        return data, {
            "Content-Type": "application/octet-stream",
            BINARY_HEADER: str(header_length),
        }
    return dumps_lossless(body), {"Content-Type": "application/json"}
