"""Tracing switched on from the standard OpenTelemetry environment or ``--otel-endpoint``
(docs/observability.md#tracing): the resource (OpenTelemetry SDK's detection:
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the sampler
(``OTEL_TRACES_SAMPLER[_ARG]``), the exporter's settings (``OTEL_EXPORTER_OTLP_*``) and
the queue's (``OTEL_BSP_*``), put together for :mod:`mlserve.core.tracing`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from importlib.metadata import version
from typing import Any
from urllib.parse import unquote, urlsplit

from mlserve.core import tracing

__all__ = ["MISSING_EXTRA", "setup_tracing", "shutdown_tracing", "wanted"]

logger = logging.getLogger("mlserve.tracing")
MISSING_EXTRA = "tracing needs the otel extra: pip install 'mlserve[otel]'"
_TIMEOUT_MS = 2000  # an export's timeout when the environment sets none (the standard's: 10 s)
_SCHEDULE_MS = 1000  # between exports when no batch fills (the standard's: 5 s)
_queue: Any = None
_RATIO_LIMIT = 1 << 64


def wanted(endpoint: str | None) -> bool:
    """Whether tracing is asked for: an endpoint, by flag or the standard environment."""
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "").lower() == "none":
        return False
    return bool(endpoint or _env("ENDPOINT"))


def _env(name: str) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``."""
    found = os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
    return found if found else os.environ.get(f"OTEL_EXPORTER_OTLP_{name}") or None


def _number(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        logger.warning("%s=%r is not a number: %s is used", name, os.environ[name], default)
        return default


def _sampler() -> tuple[Callable[[int], bool], bool]:
    """``(sample_root, follow_parent)`` of ``OTEL_TRACES_SAMPLER``: always_on, always_off,
    traceidratio, and the parentbased_ form of each (the default: parentbased_always_on)."""
    name = (os.environ.get("OTEL_TRACES_SAMPLER") or "parentbased_always_on").strip().lower()
    follow = name.startswith("parentbased_")
    root = name.removeprefix("parentbased_")
    if root == "traceidratio":
        ratio = min(max(_number("OTEL_TRACES_SAMPLER_ARG", 1.0), 0.0), 1.0)
        bound = round(ratio * _RATIO_LIMIT)  # the SDK's rule: the trace id's low 64 bits
        return (lambda trace_id: (trace_id & (_RATIO_LIMIT - 1)) < bound), follow
    if root == "always_off":
        return (lambda trace_id: False), follow
    if root != "always_on":
        logger.warning("OTEL_TRACES_SAMPLER=%s is not known here: parentbased_always_on", name)
        follow = True
    return (lambda trace_id: True), follow


def _headers() -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs, comma-separated, URL-encoded."""
    headers = {}
    for pair in (_env("HEADERS") or "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            headers[unquote(key.strip()).lower()] = unquote(value.strip())
    return headers


def _sender(endpoint: str | None, protocol: str) -> Any:
    from mlserve.monitoring.otlp import GrpcSender, HttpSender

    timeout = _number(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
        if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        else "OTEL_EXPORTER_OTLP_TIMEOUT",
        _TIMEOUT_MS,
    )
    headers, certificate = _headers(), _env("CERTIFICATE")
    seconds = timeout / 1000  # milliseconds, as the standard says
    compression = (_env("COMPRESSION") or "").lower() or None
    if protocol == "grpc":
        url = endpoint or _env("ENDPOINT") or "http://localhost:4317"
        parts = urlsplit(url if "://" in url else f"//{url}")
        if parts.scheme in ("http", "https"):  # a scheme decides, as the standard says
            secure = parts.scheme == "https"
        else:
            secure = (_env("INSECURE") or "false").lower() != "true"
        return GrpcSender(parts.netloc or url, secure, headers, seconds, compression, certificate)
    if endpoint is None and os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        url = os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]  # the signal's URL, whole
    else:
        url = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
        if not url.rstrip("/").endswith("/v1/traces"):
            url = url.rstrip("/") + "/v1/traces"  # a base URL, as the standard variable
    if "://" not in url:
        url = f"http://{url}"  # host:port alone
    return HttpSender(url, headers, seconds, compression, certificate)


def _resource(service_name: str | None) -> dict[str, Any]:
    """The SDK's resource: ``telemetry.sdk.*``, ``OTEL_RESOURCE_ATTRIBUTES``, and
    ``service.name`` from ``OTEL_SERVICE_NAME``, else those attributes, else the function's."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    detected = OTELResourceDetector().detect().attributes.get("service.name")
    name = detected or service_name or "mlserve"
    # process.pid tells the workers of --workers N apart
    resource = Resource.create({"service.name": name, "process.pid": os.getpid()})
    return dict(resource.attributes)


def setup_tracing(endpoint: str | None, protocol: str | None, service_name: str | None) -> bool:
    """Export spans over OTLP when an endpoint is set (``endpoint`` wins over the
    environment); return whether tracing is on. Without the ``otel`` extra, one
    line says so and serving goes on untraced."""
    global _queue
    if not wanted(endpoint):
        return False
    protocol = protocol or _env("PROTOCOL") or "http/protobuf"
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(f"OTLP protocol {protocol!r}: use http/protobuf or grpc")
    try:
        resource = _resource(service_name)
    except ImportError:
        print(f"mlserve: {MISSING_EXTRA}", file=sys.stderr, flush=True)
        return False
    from mlserve.monitoring.otlp import SpanEncoder
    from mlserve.monitoring.span_queue import SpanQueue

    encoder = SpanEncoder(resource, "mlserve", version("mlserve"))
    max_queue = max(int(_number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)), 1)
    queue = SpanQueue(
        encoder,
        _sender(endpoint, protocol),
        max_queue=max_queue,
        batch=min(max(int(_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)), 1), max_queue),
        interval=_number("OTEL_BSP_SCHEDULE_DELAY", _SCHEDULE_MS) / 1000,
    )
    if _queue is not None:
        _queue.shutdown()
    _queue = queue
    sample_root, follow_parent = _sampler()
    tracing.enable(queue.put, sample_root, follow_parent)
    return True


def shutdown_tracing() -> None:
    """Send the spans still queued and stop tracing (at a server's exit)."""
    global _queue
    tracing.disable()
    if _queue is not None:
        queue, _queue = _queue, None
        queue.shutdown()
