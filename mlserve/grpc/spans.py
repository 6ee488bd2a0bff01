"""The server span of a gRPC call (V2's and TF Serving's services): named by the
method (``inference.GRPCInferenceService/ModelInfer``), the caller's ``traceparent``
metadata continued, the RPC semantic conventions' attributes, and no span for the
probes (docs/observability.md#tracing).

``mlserve.grpc.counting`` calls here only when ``tracing.on``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from mlserve.core import tracing
from mlserve.grpc.status import ServicerContext

__all__ = ["UNTRACED", "traced_stream", "traced_unary"]

UNTRACED = frozenset({"ServerLive", "ServerReady", "ModelReady"})  # probes: no span

# the codes that are the server's failure (the RPC conventions: the others leave it unset)
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _metadata(context: ServicerContext) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        found[key] = value if isinstance(value, str) else value.decode("latin-1")
    return found


def _attributes(service: str, method: str, request: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "rpc.system": "grpc",
        "rpc.service": service,
        "rpc.method": method,
    }
    spec = getattr(request, "model_spec", None)  # TF Serving's requests
    model = getattr(request, "model_name", None) or getattr(spec, "name", None)
    version = getattr(request, "model_version", None)
    if version is None and spec is not None and spec.HasField("version"):
        version = str(spec.version.value)
    if model:
        attributes["mlserve.model"] = model
        if version:
            attributes["mlserve.model.version"] = version
    return attributes


def _server_span(
    name: str, context: ServicerContext, service: str, method: str, request: Any
) -> tracing.Span:
    """The call's server span; its attributes written only when its trace is sampled."""
    span = tracing.server_span(name, _metadata(context), None, lowercase=True)
    if span.sampled:
        span.attributes.update(_attributes(service, method, request))
    return span


def _ended(current: Any, context: ServicerContext, error: BaseException | None) -> None:
    code = context.code()
    if code is None:
        code = grpc.StatusCode.OK if error is None else grpc.StatusCode.UNKNOWN
    current.set_attribute("rpc.grpc.status_code", code.value[0])
    if code in _SERVER_ERRORS:
        tracing.set_error(current, str(code.name), error)


async def traced_unary(
    behavior: Callable[..., Awaitable[Any]],
    request: Any,
    context: ServicerContext,
    service: str,
    method: str,
) -> Any:
    """``behavior(request, context)`` inside the call's server span."""
    name = f"{service}/{method}"
    with _server_span(name, context, service, method, request) as s:
        error: BaseException | None = None
        try:
            answer = await behavior(request, context)
        except BaseException as exc:  # ended here, raised after the span: its code decides
            error = exc
        _ended(s, context, error)
    if error is not None:
        raise error
    return answer


async def traced_stream(
    answers: Any,
    context: ServicerContext,
    service: str,
    method: str,
) -> AsyncIterator[Any]:
    """The answers of a streaming call (or the coroutine that writes them) inside its span."""
    name = f"{service}/{method}"
    with _server_span(name, context, service, method, None) as s:
        error: BaseException | None = None
        try:
            if hasattr(answers, "__aiter__"):
                async for answer in answers:
                    yield answer
            else:  # a coroutine that writes with context.write
                await answers
        except BaseException as exc:
            error = exc
        _ended(s, context, error)
    if error is not None:
        raise error
