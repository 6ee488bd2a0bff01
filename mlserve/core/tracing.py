"""OpenTelemetry spans for every face and step, one attribute read when off.

Call sites do ``from mlserve.core import tracing`` and test ``if tracing.on:`` at
call time; nothing of opentelemetry is imported until :func:`enable` runs
(docs/observability.md#tracing).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

__all__ = [
    "carry",
    "carry_for_logs",
    "copy_context",
    "disable",
    "enable",
    "inject",
    "on",
    "server_span",
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

_tracer: Any = None
_trace: Any = None  # the opentelemetry.trace module, once enabled
_propagator: Any = None
_getter: Any = None
_kinds: dict[str, Any] = {}


class _HeaderGetter:
    """Reads ``traceparent`` from headers whatever their case (HTTP, gRPC metadata, Kafka)."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if value is None:
            for name, item in carrier.items():
                if name.lower() == key:
                    value = item
                    break
        if value is None:
            return None
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        return [value] if isinstance(value, str) else [str(v) for v in value]

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


def enable(tracer: Any) -> None:
    """Start tracing with ``tracer`` (an opentelemetry ``Tracer``)."""
    global on, carry, _tracer, _trace, _propagator, _getter
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _trace = trace
    _propagator = TraceContextTextMapPropagator()
    _getter = _HeaderGetter()
    _kinds.update(
        internal=trace.SpanKind.INTERNAL,
        client=trace.SpanKind.CLIENT,
        producer=trace.SpanKind.PRODUCER,
        consumer=trace.SpanKind.CONSUMER,
        server=trace.SpanKind.SERVER,
    )
    _tracer = tracer
    on = carry = True


def disable() -> None:
    """Stop tracing: call sites see ``on`` false and start no span."""
    global on, carry, _tracer
    on = False
    carry = _logs_carry
    _tracer = None


def carry_for_logs(wanted: bool) -> None:
    """Whether log lines need the request's context on worker threads."""
    global carry, _logs_carry
    _logs_carry = wanted
    carry = on or wanted


@contextmanager
def _server_span(
    name: str, headers: Mapping[str, str] | None, attributes: dict[str, Any], kind: str
) -> Iterator[Any]:
    parent = _propagator.extract(headers or {}, getter=_getter)
    with _tracer.start_as_current_span(
        name, context=parent, kind=_kinds[kind], attributes=attributes
    ) as current:
        yield current


def server_span(
    name: str,
    headers: Mapping[str, str] | None,
    attributes: dict[str, Any],
    kind: str = "server",
) -> AbstractContextManager[Any]:
    """A SERVER span (or ``kind``: a Kafka message's "consumer") continuing the caller's
    W3C ``traceparent``, else a new trace."""
    if not on:
        return nullcontext()
    return _server_span(name, headers, attributes, kind)


def span(
    name: str,
    attributes: dict[str, Any] | None = None,
    links: list[Any] | None = None,
    kind: str = "internal",
) -> AbstractContextManager[Any]:
    """A child of the current span; ``links`` are span contexts (or ``Link`` objects).
    Outside any span (a probe's road, a mock call not traced) there is none: no orphans."""
    if not on or not _trace.get_current_span().get_span_context().is_valid:
        return nullcontext()
    linked = None
    if links:
        linked = [lk if isinstance(lk, _trace.Link) else _trace.Link(lk) for lk in links]
    return _tracer.start_as_current_span(
        name, kind=_kinds[kind], attributes=attributes, links=linked
    )


def set_status(current: Any, status: int) -> None:
    """Record an HTTP-like status on ``current``: 5xx is an error, 4xx is left unset."""
    if current is None or not on:
        return
    current.set_attribute("http.response.status_code", status)
    if status >= 500:
        current.set_status(_trace.Status(_trace.StatusCode.ERROR))


def inject(headers: dict[str, str]) -> None:
    """Write the current span's ``traceparent`` (and ``tracestate``) into ``headers``."""
    if on:
        _propagator.inject(headers)


def trace_id() -> str | None:
    """The current trace id as 32 hex digits, or None outside a span."""
    if not on:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}"


def span_id() -> str | None:
    """The current span id as 16 hex digits, or None outside a span."""
    if not on:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.span_id:016x}"


def span_context() -> Any:
    """The current span's context, to link a batch's span to each of its requests."""
    if not on:
        return None
    return _trace.get_current_span().get_span_context()


def copy_context() -> contextvars.Context:
    """The current context (its span included) to run a function in on another thread."""
    return contextvars.copy_context()
