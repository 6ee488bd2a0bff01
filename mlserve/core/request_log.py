"""Request ids, the access log and JSON log lines (docs/observability.md#logs).

A face names each answer with its request id (the V2 request's ``id``, else the
event's generated one) in ``x-request-id``. With ``--log-format json`` or
``--access-log`` on, the face also sets :data:`current` to the event it answers,
so that every log line written meanwhile says which request and model it is about;
off, the faces pay one attribute read.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import time
from datetime import UTC, datetime
from typing import Any, TypeGuard

from mlserve.core import tracing
from mlserve.core.events import Event

__all__ = [
    "REQUEST_ID_HEADER",
    "JsonFormatter",
    "access",
    "access_logger",
    "configure",
    "current",
    "log_access",
    "model_of",
    "named",
    "new_id",
    "request_id",
    "track",
]

REQUEST_ID_HEADER = "x-request-id"
_MAX_ID = 128
access: bool = False  # --access-log: one line per request
track: bool = False  # set ``current`` per request (JSON logs or the access log are on)
# the event being answered (or, on gRPC, the call's request id) and its path as it
# arrived (the router rewrites an event's)
current: contextvars.ContextVar[tuple[Event | str, str] | None] = contextvars.ContextVar(
    "mlserve_request", default=None
)
access_logger = logging.getLogger("mlserve.access")


def named(value: object) -> TypeGuard[str]:
    """Whether a client's ``id`` can name its request in a header and a log line: a
    printable string of 1 to 128 characters (no CR/LF to split a response with)."""
    return type(value) is str and 0 < len(value) <= _MAX_ID and value.isprintable()


def request_id(event: Event) -> str:
    """The request's id: its V2 ``id`` (the answer's, which echoes it, once answered),
    else the event's own generated one."""
    body = event.body
    if type(body) is dict:
        value = body.get("id")
        if value is not None and named(value):
            return value
    return event.id


def model_of(path: str, event: Event | None = None) -> str | None:
    """The model a request names: its ``/v2/models/<m>`` path, else its body's ``model``."""
    if path.startswith("/v2/models/"):
        name = path[11:].partition("/")[0]
        return name or None
    if event is not None and type(event.body) is dict:
        given = event.body.get("model") or event.body.get("model_name")
        return str(given) if given else None
    return None


def new_id() -> str:
    """A generated request id: 32 hex digits, as ``uuid4().hex``."""
    return os.urandom(16).hex()


def log_access(
    method: str,
    path: str,
    status: int,
    started: float,
    size: int,
    client: str,
    rid: str,
    model: str | None,
) -> None:
    """Write one access-log line (``started``: ``time.perf_counter()`` at arrival)."""
    fields = {
        "method": method,
        "path": path,
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        "bytes": size,
        "client": client,
        "request_id": rid,
        "trace_id": tracing.trace_id(),
        "model": model,
    }
    access_logger.info(
        '%s - "%s %s" %d %dB %.1fms id=%s',
        client or "-",
        method,
        path,
        status,
        size,
        fields["duration_ms"],
        rid,
        extra={"access": fields},
    )


def _rfc3339(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the request's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        answering = current.get()
        if answering is not None:
            event, path = answering
            if isinstance(event, str):
                line["request_id"] = event
                model = model_of(path)
            else:
                line["request_id"] = request_id(event)
                model = model_of(path, event)
            if model is not None:
                line["model"] = model
        if tracing.on:
            trace = tracing.trace_id()
            if trace is not None:
                line["trace_id"] = trace
                line["span_id"] = tracing.span_id()
        fields = getattr(record, "access", None)
        if isinstance(fields, dict):
            line.update((k, v) for k, v in fields.items() if v is not None)
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        return json.dumps(line, default=str)


def configure(log_format: str, access_log: bool) -> None:
    """Set the root handler's format (``text`` or ``json``) and the access log."""
    global access, track
    access = access_log
    track = access_log or log_format == "json"
    tracing.carry_for_logs(track)
    access_logger.setLevel(logging.INFO if access_log else logging.WARNING)
    if log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
