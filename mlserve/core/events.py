"""The Event every face builds and the Response the server hands back.

The attribute names follow nuclio's ``Event``/``Response`` so that mlrun code
that reads ``event.body``, ``event.path`` or ``response.status_code`` works.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from random import getrandbits as _random_bits
from time import time_ns as _time_ns
from typing import Any

__all__ = ["Event", "MockEvent", "Response", "Trigger", "HTTP_TRIGGERS"]

# Triggers whose caller waits on the line: a model still loading answers 503 at once.
HTTP_TRIGGERS = frozenset({"", "http", "grpc"})


@dataclass(slots=True)
class Trigger:
    kind: str = ""
    name: str = ""


# The Trigger of a kind named by a string (the mock server's events, mostly): one
# object per kind, shared by its events as each face shares its own.
_TRIGGERS: dict[str, Trigger] = {}


def _trigger(kind: str) -> Trigger:
    trigger = _TRIGGERS.get(kind)
    if trigger is None:
        trigger = Trigger(kind=kind)
        if len(_TRIGGERS) < 64:  # kinds are few; a caller inventing them gets fresh ones
            _TRIGGERS[kind] = trigger
    return trigger


class Event:
    """One request, whatever face it came from."""

    __slots__ = (
        "body",
        "content_type",
        "headers",
        "method",
        "path",
        "id",
        "trigger",
        "_time",
        "offset",
        "error",
        "origin_state",
        "terminated",
        "key",
        "query",
    )

    def __init__(
        self,
        body: Any = None,
        content_type: str | None = None,
        headers: dict[str, Any] | None = None,
        method: str | None = None,
        path: str | None = "/",
        event_id: str | None = None,
        trigger: Trigger | str | None = None,
        time: datetime | None = None,
        offset: int | None = None,
        query: str = "",
    ) -> None:
        self.body = body
        self.content_type = content_type or ""
        self.headers = headers or {}
        self.method = method or ("POST" if body is not None else "GET")
        self.path = path or "/"
        # 32 random hex digits, as uuid4().hex. An id names an event, it guards nothing: the
        # process's Mersenne Twister (reseeded in forked workers) spares a getrandom call.
        self.id = event_id or f"{_random_bits(128):032x}"
        self.trigger = trigger if isinstance(trigger, Trigger) else _trigger(trigger or "")
        self._time: datetime | int = time or _time_ns()  # a datetime when first read
        self.offset = offset
        self.error: Any = None
        self.origin_state: str | None = None
        self.terminated = False
        self.key: Any = None
        self.query = query  # the raw query string of an HTTP request ("a=1&b=2")

    @property
    def time(self) -> datetime:
        """When the event was made (an aware UTC datetime, built on first read)."""
        made = self._time
        if isinstance(made, int):
            made = self._time = datetime.fromtimestamp(made / 1e9, UTC)
        return made

    @time.setter
    def time(self, value: datetime) -> None:
        self._time = value

    def __repr__(self) -> str:
        return (
            f"Event(id={self.id!r}, method={self.method!r}, path={self.path!r}, body={self.body!r})"
        )


# mlrun's name for the events built by ``server.test()``.
MockEvent = Event


class Response:
    """A body with its status, content type and headers."""

    __slots__ = ("body", "status_code", "content_type", "headers")

    def __init__(
        self,
        body: Any = None,
        status_code: int = 200,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.body = body
        self.status_code = status_code
        self.content_type = content_type
        self.headers = headers or {}

    def __repr__(self) -> str:
        return f"Response(status_code={self.status_code}, body={self.body!r})"
