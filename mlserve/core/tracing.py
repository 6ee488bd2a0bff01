"""Spans for every face and step, one attribute read when off (docs/observability.md#tracing).

Call sites do ``from mlserve.core import tracing`` and test ``if tracing.on:`` at call
time. A span here is OpenTelemetry's span (trace and span ids, parent, kind, times,
attributes, links, events, status) kept in one slotted object: starting and ending one
costs about a microsecond, where the OpenTelemetry SDK's costs tens, and an ended span
goes to the sink that :func:`enable` was given (``mlserve.monitoring.span_queue``,
which writes OTLP). The caller's context comes and goes as W3C ``traceparent`` and
``tracestate``, which OpenTelemetry's propagators read and write.
"""

from __future__ import annotations

import contextvars
import re
import time
import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from random import getrandbits
from typing import Any

__all__ = [
    "Span",
    "carry",
    "carry_for_logs",
    "copy_context",
    "current",
    "disable",
    "enable",
    "inject",
    "on",
    "otel_context",
    "parse_traceparent",
    "recording",
    "server_span",
    "set_error",
    "set_status",
    "span",
    "span_context",
    "span_id",
    "trace_id",
]

on: bool = False
# copy the caller's context to worker threads: tracing is on, or log lines name their
# request (``mlserve.core.request_log``); read by ``mlserve.core.aio``
carry: bool = False
_logs_carry = False

# where ended, sampled spans go, and whether a new trace is sampled (from its trace id)
_sink: Callable[[Span], None] | None = None
_sample_root: Callable[[int], bool] = lambda trace_id: True  # noqa: E731
_follow_parent = True  # parent-based sampling: a caller's flag decides for its trace

_current: contextvars.ContextVar[Span | None] = contextvars.ContextVar("mlserve_span", default=None)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_time_ns = time.time_ns


class Span:
    """One span; ``parent_id`` 0 is a root, ``remote_parent`` a caller's ``traceparent``.
    ``error`` None leaves the status unset, a string is an ERROR with that description."""

    __slots__ = (
        "attributes",
        "end_ns",
        "error",
        "events",
        "kind",
        "links",
        "name",
        "parent_id",
        "remote_parent",
        "sampled",
        "span_id",
        "start_ns",
        "token",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        attributes: dict[str, Any] | None,
        trace_id: int,
        parent_id: int,
        sampled: bool,
        trace_state: str,
    ) -> None:
        self.name = name
        self.kind = kind
        self.attributes = attributes if attributes is not None else {}
        self.trace_id = trace_id
        self.parent_id = parent_id
        self.sampled = sampled
        self.trace_state = trace_state
        self.remote_parent = False
        self.span_id = getrandbits(64) or 1
        self.links: list[tuple[int, int]] | tuple[()] = ()  # lists only when there are any
        self.events: list[tuple[str, int, dict[str, Any]]] | tuple[()] = ()
        self.error: str | None = None
        self.end_ns = 0
        self.start_ns = _time_ns()

    def __enter__(self) -> Span:
        self.token = _current.set(self)
        return self

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        _current.reset(self.token)
        if exc is not None and isinstance(exc, Exception):  # a cancel is no error
            self.record_exception(exc)
            if self.error is None:
                self.error = f"{type(exc).__name__}: {exc}"
        self.end_ns = _time_ns()
        if self.sampled and _sink is not None:
            _sink(self)

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def record_exception(self, exc: BaseException) -> None:
        """An ``exception`` event in the semantic conventions' names."""
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        attributes = {
            "exception.type": type(exc).__name__,
            "exception.message": str(exc),
            "exception.stacktrace": stack,
        }
        self.events = [*self.events, ("exception", _time_ns(), attributes)]

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"


def enable(
    sink: Callable[[Span], None],
    sample_root: Callable[[int], bool] | None = None,
    follow_parent: bool = True,
) -> None:
    """Start tracing: ended, sampled spans go to ``sink``; ``sample_root(trace_id)`` decides
    for a new trace (default: all), and ``follow_parent`` keeps a caller's decision."""
    global on, carry, _sink, _sample_root, _follow_parent
    _sink = sink
    _sample_root = sample_root or (lambda trace_id: True)
    _follow_parent = follow_parent
    on = carry = True


def disable() -> None:
    """Stop tracing: call sites see ``on`` false and start no span."""
    global on, carry, _sink
    on = False
    carry = _logs_carry
    _sink = None


def carry_for_logs(wanted: bool) -> None:
    """Whether log lines need the request's context on worker threads."""
    global carry, _logs_carry
    _logs_carry = wanted
    carry = on or wanted


def parse_traceparent(value: str | bytes | None) -> tuple[int, int, bool] | None:
    """``(trace_id, span_id, sampled)`` of a W3C ``traceparent``; None for a bad one."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace, parent, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, parent_id = int(trace, 16), int(parent, 16)
    if not trace_id or not parent_id:
        return None
    return trace_id, parent_id, bool(int(flags, 16) & 1)


def _header(headers: Mapping[str, Any], key: str, lowercase: bool) -> Any:
    """``headers[key]`` whatever its case (HTTP, gRPC metadata, Kafka headers);
    ``lowercase``: the names are, no need to look further."""
    value = headers.get(key)
    if value is None and not lowercase:
        for name, item in headers.items():
            if name.lower() == key:
                return item
    return value


def server_span(
    name: str,
    headers: Mapping[str, Any] | None,
    attributes: dict[str, Any] | None,
    kind: str = "server",
    lowercase: bool = False,
) -> Any:
    """A SERVER span (or ``kind``: a Kafka message's "consumer") continuing the caller's
    W3C ``traceparent``, else a new trace; never a child of the span current here.
    ``lowercase``: the header names are (the HTTP and gRPC faces'), no need to look
    further than ``headers["traceparent"]``. Off: a context that yields None."""
    if not on:
        return nullcontext()
    headers = headers or {}
    found = parse_traceparent(_header(headers, "traceparent", lowercase))
    if found is None:
        trace_id = getrandbits(128) or 1
        return Span(name, kind, attributes, trace_id, 0, _sample_root(trace_id), "")
    trace_id, parent_id, sampled = found
    if not _follow_parent:
        sampled = _sample_root(trace_id)
    state = _header(headers, "tracestate", lowercase)
    if isinstance(state, bytes):
        state = state.decode("latin-1")
    opened = Span(name, kind, attributes, trace_id, parent_id, sampled, state or "")
    opened.remote_parent = True
    return opened


def span(
    name: str,
    attributes: dict[str, Any] | None = None,
    links: list[tuple[int, int] | None] | None = None,
    kind: str = "internal",
) -> AbstractContextManager[Any]:
    """A child of the current span; ``links``: :func:`span_context` values. Outside any
    span (a probe's road, a mock call not traced) or in a trace not sampled there is
    none: no orphans, and nothing recorded that would not be sent."""
    parent = _current.get()
    if parent is None or not parent.sampled:  # (off: nothing sets a current span)
        return nullcontext()
    child = Span(name, kind, attributes, parent.trace_id, parent.span_id, True, parent.trace_state)
    if links:
        child.links = [link for link in links if link is not None]
    return child


def current() -> Span | None:
    """The span current here (a trace not sampled included), or None."""
    return _current.get() if on else None


def recording() -> bool:
    """Whether a span started here would be recorded: tracing is on, and the current
    span's trace is sampled (call sites skip building a span's attributes otherwise)."""
    opened = current()
    return opened is not None and opened.sampled


def set_status(opened: Any, status: int) -> None:
    """Record an HTTP-like status on ``opened``: 5xx is an error, 4xx is left unset."""
    if opened is None or not on:
        return
    opened.attributes["http.response.status_code"] = status
    if status >= 500:
        opened.error = opened.error or ""


def set_error(opened: Any, description: str = "", exc: BaseException | None = None) -> None:
    """Mark ``opened`` an ERROR, with ``exc`` as its ``exception`` event when given."""
    if opened is None or not on:
        return
    if exc is not None:
        opened.record_exception(exc)
    opened.error = description


def inject(headers: dict[str, str]) -> None:
    """Write the current span's ``traceparent`` (and ``tracestate``) into ``headers``."""
    opened = current()
    if opened is None:
        return
    headers["traceparent"] = opened.traceparent()
    if opened.trace_state:
        headers["tracestate"] = opened.trace_state


def trace_id() -> str | None:
    """The current trace id as 32 hex digits, or None outside a span."""
    opened = current()
    return None if opened is None else f"{opened.trace_id:032x}"


def span_id() -> str | None:
    """The current span id as 16 hex digits, or None outside a span."""
    opened = current()
    return None if opened is None else f"{opened.span_id:016x}"


def span_context() -> tuple[int, int] | None:
    """``(trace_id, span_id)`` of the current span, to link a batch's span to a request."""
    opened = current()
    if opened is None or not opened.sampled:
        return None
    return opened.trace_id, opened.span_id


def otel_context() -> Any:
    """The current span as an OpenTelemetry ``Context``, so that spans a model makes with
    OpenTelemetry's own API are its children:
    ``tracer.start_as_current_span(name, context=tracing.otel_context())``. None outside
    a span (OpenTelemetry's ``context=None``: its own current context)."""
    opened = current()
    if opened is None:
        return None
    from opentelemetry import trace  # tracing is on: the otel extra is installed

    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if opened.sampled else 0)
    context = trace.SpanContext(opened.trace_id, opened.span_id, is_remote=False, trace_flags=flags)
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


def copy_context() -> contextvars.Context:
    """The current context (its span included) to run a function in on another thread."""
    return contextvars.copy_context()
