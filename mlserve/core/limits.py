"""Server-side limits, their flags and their variables: per-request timeout, per-model
concurrency and queue, drain timeout, the inline bound.

One slow model must not starve the others (docs/security.md#limits): every model gets
its own threads for sync ``predict`` and its own bounded queue; past the queue a call
answers 429 with ``Retry-After`` at once instead of waiting behind the rest. A request
that runs past the timeout answers 504; the model's later result is dropped. Each
setting is a CLI flag and an environment variable. What enforces them lives beside:
``gate`` (concurrency, queue), ``inline_rule`` (the inline bound), ``deadlines``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields
from typing import Any

from mlserve.core.events import HTTP_TRIGGERS, Event
from mlserve.protocol.errors import Timeout, TooManyRequests

__all__ = [
    "DEFAULTS",
    "Overloaded",
    "RequestTimeout",
    "ServerLimits",
    "add_limit_flags",
    "limits_of",
    "request_timeout",
    "server_limits",
    "stream_limits",
]

# Seconds a 429 asks the client to wait before retrying.
RETRY_AFTER_SECONDS = 1


class Overloaded(TooManyRequests):
    """A model's queue is full: 429 with ``Retry-After``."""

    retry_after = RETRY_AFTER_SECONDS


class RequestTimeout(Timeout):
    """The request ran past the server's request timeout: 504."""


@dataclass(frozen=True)
class ServerLimits:
    """The limits a GraphServer applies; 0 turns a limit off (but model_concurrency).

    request_timeout: seconds a request may take (504 past it).
    model_concurrency: sync predict calls one model runs at once (its own threads).
    model_queue: calls that may wait for a model's thread; more answer 429.
    drain_timeout: seconds requests in flight get to finish after SIGTERM.
    drain_delay: seconds after SIGTERM during which readiness is already 503 but
        requests are still taken (a load balancer's time to notice).
    inline_predict_us: a sync model whose calls take a median under this many
        microseconds runs on the event loop, where a thread hop costs more than
        the call (see ModelGate).
    stream_queue: chunks a streaming model's sync generator may run ahead of a slow
        reader before it waits (docs/security.md#limits).
    stream_chunk_timeout: seconds a stream may go without a chunk (504 past it);
        None: the request timeout.
    stream_timeout: seconds a whole stream may take (504 past it).
    """

    request_timeout: float = 60.0
    model_concurrency: int = 32
    model_queue: int = 512
    drain_timeout: float = 30.0
    drain_delay: float = 0.0
    inline_predict_us: float = 200.0
    stream_queue: int = 16
    stream_chunk_timeout: float | None = None
    stream_timeout: float = 0.0

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **given: Any) -> ServerLimits:
        """Defaults, overridden by ``MLSERVE_<NAME>`` variables, overridden by ``given``
        (None values in ``given`` are ignored)."""
        environ = dict(os.environ if environ is None else environ)
        values: dict[str, Any] = {}
        for item in fields(cls):
            kind = float if "float" in str(item.type) else int
            raw = environ.get(f"MLSERVE_{item.name.upper()}")
            if raw is not None:
                try:
                    values[item.name] = kind(raw)
                except ValueError:
                    name = f"MLSERVE_{item.name.upper()}"
                    raise ValueError(f"{name}={raw!r} is not a number") from None
            if given.get(item.name) is not None:
                values[item.name] = kind(given[item.name])
        for name, value in values.items():
            if name in ("model_concurrency", "stream_queue") and value < 1:
                raise ValueError(f"{name} must be 1 or more, got {value}")
            if value < 0:
                raise ValueError(f"{name} must be 0 (off) or more, got {value}")
        return cls(**values)


DEFAULTS = ServerLimits()

_FLAG_HELP = {
    "request_timeout": "seconds a request may take before it answers 504 (0: no limit)",
    "model_concurrency": "sync predict calls one model runs at once, on its own threads",
    "model_queue": "calls that may wait for a busy model; more answer 429 (Retry-After)",
    "drain_timeout": "seconds requests in flight get to finish after SIGTERM (0: no limit)",
    "drain_delay": "seconds after SIGTERM that readiness is 503 while requests are still taken",
    "inline_predict_us": "a sync predict whose calls take a median under this many us runs on "
    "the event loop, until one call takes 50 times that (0: always on threads)",
    "stream_queue": "chunks a streaming model may produce ahead of a slow reader before it waits",
    "stream_chunk_timeout": "seconds a stream may go without a chunk before it ends with 504 "
    "(0: no limit, default: the request timeout)",
    "stream_timeout": "seconds a whole stream may take before it ends with 504 (0: no limit)",
}


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """``--request-timeout`` and the rest; each defaults to ``MLSERVE_<NAME>`` or DEFAULTS."""
    for item in fields(ServerLimits):
        default = getattr(DEFAULTS, item.name)
        parser.add_argument(
            "--" + item.name.replace("_", "-"),
            type=float if "float" in str(item.type) else int,
            default=None,
            help=f"{_FLAG_HELP[item.name]} (env MLSERVE_{item.name.upper()}"
            + (f", default {default})" if default is not None else ")"),
        )


def server_limits(args: argparse.Namespace) -> ServerLimits:
    """The limits the command line and the environment ask for; a bad value exits
    with its message."""
    try:
        return ServerLimits.from_env(
            **{f.name: getattr(args, f.name) for f in fields(ServerLimits)}
        )
    except ValueError as exc:
        raise SystemExit(f"mlserve serve: {exc}") from None


def limits_of(context: object) -> ServerLimits:
    """The limits of the server a step runs in (the defaults outside a server)."""
    limits = getattr(getattr(context, "server", None), "limits", None)
    return limits if isinstance(limits, ServerLimits) else DEFAULTS


def request_timeout(limits: ServerLimits, event: Event) -> float:
    """The deadline of an event: requests (HTTP, gRPC, mock) have one; stream events
    (Kafka, cron) may wait for a model to load."""
    return limits.request_timeout if event.trigger.kind in HTTP_TRIGGERS else 0.0


def stream_limits(limits: ServerLimits, event: Event) -> tuple[float, float]:
    """``(seconds between two chunks, seconds for the whole stream)`` of a streamed
    answer to ``event`` (0: no limit); between chunks defaults to the request timeout."""
    chunk = limits.stream_chunk_timeout
    if chunk is None:
        chunk = request_timeout(limits, event)
    return chunk, limits.stream_timeout
