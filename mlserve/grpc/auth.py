"""Authentication for every service on the gRPC server, as a ``grpc.aio``
server interceptor: the V2 inference service, TF Serving's services and any
added later are covered alike, with the REST face's credentials (the
``authorization`` metadata: ``Bearer <token>`` or ``Basic <base64>``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from mlserve.core.settings import FaceSettings
from mlserve.grpc.counting import counted
from mlserve.grpc.status import ServicerContext
from mlserve.monitoring.responses import grpc_counts
from mlserve.server.auth import authorize

__all__ = ["AuthInterceptor", "grpc_path"]

# gRPC method -> the REST path whose rule it follows (liveness, readiness, admin)
_RULES = {
    "/inference.GRPCInferenceService/ServerLive": "/v2/health/live",
    "/grpc.health.v1.Health/Check": "/v2/health/live",
    "/inference.GRPCInferenceService/ServerReady": "/v2/health/ready",
    "/inference.GRPCInferenceService/RepositoryModelLoad": "/v2/repository/models/load",
    "/inference.GRPCInferenceService/RepositoryModelUnload": "/v2/repository/models/unload",
    "/tensorflow.serving.ModelService/HandleReloadConfigRequest": "/v2/repository/models/load",
    **{
        f"/inference.GRPCInferenceService/{kind.title()}SharedMemory{rpc}": (
            f"/v2/{kind}sharedmemory"
        )
        for kind in ("system", "cuda")
        for rpc in ("Register", "Status", "Unregister")
    },
}


def grpc_path(method: str) -> str:
    """The REST path whose auth rule a gRPC method follows (itself for the others)."""
    return _RULES.get(method, method)


def _refusing(
    handler: grpc.RpcMethodHandler, code: grpc.StatusCode, message: str
) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s kind that only aborts with ``code``."""

    async def abort(request: object, context: ServicerContext) -> None:
        await context.abort(code, message)

    async def abort_stream(request: object, context: ServicerContext) -> AsyncIterator[None]:
        await context.abort(code, message)
        yield  # pragma: no cover - abort raises

    streaming = handler.response_streaming
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream, **options)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort, **options)
    if streaming:
        return grpc.unary_stream_rpc_method_handler(abort_stream, **options)
    return grpc.unary_unary_rpc_method_handler(abort, **options)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls without valid credentials: UNAUTHENTICATED (or PERMISSION_DENIED)."""

    def __init__(self, settings: FaceSettings) -> None:
        self.settings = settings
        self.counts = grpc_counts()  # the refusals, for /metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        metadata = dict(handler_call_details.invocation_metadata or ())
        authorization = metadata.get("authorization", "")
        if isinstance(authorization, bytes):
            authorization = authorization.decode("latin-1")
        refused = authorize(self.settings, grpc_path(handler_call_details.method), authorization)
        if refused is None:
            return handler
        if refused.status_code == 401:
            refusal = _refusing(handler, grpc.StatusCode.UNAUTHENTICATED, "authentication required")
        else:
            refusal = _refusing(handler, grpc.StatusCode.PERMISSION_DENIED, refused.body["error"])
        return counted(refusal, handler_call_details.method, self.counts)
