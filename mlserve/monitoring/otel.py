"""OTLP export of the spans of :mod:`mlserve.core.tracing` (docs/observability.md#tracing).

Spans wait in a bounded queue and leave in batches from a thread of their own: a
full queue drops (``mlserve_trace_spans_dropped_total``), and a collector that is
down or slow costs a request nothing (the export's timeout is short, and only that
thread waits for it).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from mlserve.core import tracing

__all__ = ["MISSING_EXTRA", "setup_tracing", "shutdown_tracing", "wanted"]

MISSING_EXTRA = "tracing needs the otel extra: pip install 'mlserve[otel]'"
_TIMEOUT = 2.0  # seconds an export may take (OTEL_EXPORTER_OTLP_TIMEOUT overrides)
_ENDPOINT_ENV = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_provider: Any = None


def wanted(endpoint: str | None) -> bool:
    """Whether tracing is asked for: an endpoint, by flag or the standard environment."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return bool(endpoint or any(os.environ.get(name) for name in _ENDPOINT_ENV))


def _exporter(endpoint: str | None, protocol: str) -> Any:
    """The OTLP exporter of ``protocol``; ``endpoint`` None: the standard environment's."""
    timed = any(
        os.environ.get(name)
        for name in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
    )
    timeout = None if timed else _TIMEOUT
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        insecure = None  # no scheme: OTEL_EXPORTER_OTLP_INSECURE decides, as the standard says
        if endpoint is not None and endpoint.startswith(("http://", "https://")):
            insecure = endpoint.startswith("http://")
        return OTLPSpanExporter(endpoint=endpoint, insecure=insecure, timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HTTPSpanExporter,
    )

    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"  # a base URL, as the standard variable
    return HTTPSpanExporter(endpoint=endpoint, timeout=timeout)


def setup_tracing(endpoint: str | None, protocol: str | None, service_name: str | None) -> bool:
    """Export spans over OTLP when an endpoint is set (``endpoint`` wins over the
    environment); return whether tracing is on. Without the ``otel`` extra, one
    line says so and serving goes on untraced."""
    global _provider
    if not wanted(endpoint):
        return False
    protocol = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(f"OTLP protocol {protocol!r}: use http/protobuf or grpc")
    try:
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider

        from mlserve.monitoring.span_queue import BoundedSpanProcessor

        exporter = _exporter(endpoint, protocol)
    except ImportError:
        print(f"mlserve: {MISSING_EXTRA}", file=sys.stderr, flush=True)
        return False
    # OTEL_SERVICE_NAME, else OTEL_RESOURCE_ATTRIBUTES' service.name, else the function's
    name = OTELResourceDetector().detect().attributes.get("service.name")
    name = name or service_name or "mlserve"
    # process.pid tells the workers of --workers N apart
    resource = Resource.create({"service.name": name, "process.pid": os.getpid()})
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER[_ARG]
    provider.add_span_processor(BoundedSpanProcessor(exporter))  # shut down at exit
    if _provider is not None:
        _provider.shutdown()
    _provider = provider
    if not logging.getLogger().isEnabledFor(logging.DEBUG):  # the queue's line a minute, not
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)  # two a second
    tracing.enable(provider.get_tracer("mlserve"))
    return True


def shutdown_tracing() -> None:
    """Send the spans still queued and stop tracing (at a server's exit)."""
    global _provider
    tracing.disable()
    if _provider is not None:
        provider, _provider = _provider, None
        provider.shutdown()
