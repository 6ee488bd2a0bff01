"""Every gRPC call's final status, counted by service and method for
``mlserve_grpc_responses_total`` (docs/monitoring.md#prometheus-metrics).

``CountedHandlers`` holds a server's generic handlers (V2's and TF Serving's) and
hands grpc each method's handler wrapped once: the wrapper awaits the call and
counts OK, or the code the call ended with (``context.abort``'s, UNKNOWN for an
exception, CANCELLED when the client went away). The auth interceptor wraps its
refusals with ``counted`` too. A method that no service has is answered
UNIMPLEMENTED by grpc itself, uncounted: its name is the client's choice.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc

from mlserve.core import request_log, tracing
from mlserve.grpc import spans
from mlserve.grpc.status import ServicerContext
from mlserve.monitoring.responses import GrpcKey, grpc_counts

__all__ = ["CountedHandlers", "counted"]

_Counts = dict[GrpcKey, int]


def _ended(context: ServicerContext, error: BaseException | None) -> str:
    """The name of the code a call ended with."""
    code = context.code()
    if code is not None:
        return str(code.name)
    if error is None:
        return "OK"
    return "CANCELLED" if isinstance(error, asyncio.CancelledError) else "UNKNOWN"


def _log_access(
    path: str,
    request: Any,
    context: ServicerContext,
    error: BaseException | None,
    started: float,
    rid: str,
    answer: Any = None,
) -> None:
    """The access-log line of one call: its status is the gRPC code's number, its
    bytes the answer's (a unary call's)."""
    code = grpc.StatusCode[_ended(context, error)].value[0]
    model = getattr(request, "model_name", None) or getattr(request, "name", None)
    size = len(answer) if isinstance(answer, bytes) else 0
    if hasattr(answer, "ByteSize"):
        size = answer.ByteSize()
    peer = context.peer() or ""
    request_log.log_access("POST", path, code, started, size, peer, rid, model or None)


async def _logged(
    behavior: Callable[..., Awaitable[Any]],
    request: Any,
    context: ServicerContext,
    path: str,
    rid: str,
) -> Any:
    """``behavior(request, context)``, then its access-log line (inside the call's span,
    if any: the line names its trace)."""
    started = time.perf_counter()
    try:
        answer = await behavior(request, context)
    except BaseException as exc:
        _log_access(path, request, context, exc, started, rid)
        raise
    _log_access(path, request, context, None, started, rid, answer)
    return answer


async def _logged_stream(
    answers: Any, context: ServicerContext, path: str, rid: str
) -> AsyncIterator[Any]:
    """A streaming call's answers (or the coroutine that writes them), then its
    access-log line."""
    started = time.perf_counter()
    try:
        if hasattr(answers, "__aiter__"):
            async for answer in answers:
                yield answer
        else:
            await answers
    except BaseException as exc:
        _log_access(path, None, context, exc, started, rid)
        raise
    _log_access(path, None, context, None, started, rid)


def counted(handler: grpc.RpcMethodHandler, path: str, counts: _Counts) -> grpc.RpcMethodHandler:
    """``handler`` of the method ``path`` (``/package.Service/Method``), each call's
    final status counted in ``counts``."""
    service, _, method = path.lstrip("/").rpartition("/")
    ok: GrpcKey = (service, method, "OK")
    spanned = method not in spans.UNTRACED  # a probe gets no span
    named = method == "ModelInfer"  # its V2 id is the request id (docs/observability.md#logs)
    probe = not spanned  # the access log leaves probes out, as the spans do

    def count(context: ServicerContext, error: BaseException | None) -> None:
        code = _ended(context, error)
        key = ok if code == "OK" else (service, method, code)
        counts[key] = counts.get(key, 0) + 1

    def unary(behavior: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: ServicerContext) -> Any:
            rid = ""
            if named:
                rid = request.id
                if not request_log.named(rid):  # none, or unfit for a header: one made
                    rid = request_log.new_id()
                    if not request.id:  # the answer's id is then the same
                        request.id = rid
                context.set_trailing_metadata(((request_log.REQUEST_ID_HEADER, rid),))
                if request_log.track:
                    request_log.current.set((rid, f"/v2/models/{request.model_name}"))
            run = behavior
            if request_log.access and not probe:
                run = functools.partial(_logged, behavior, path=path, rid=rid)
            try:
                if tracing.on and spanned:  # docs/observability.md#tracing
                    answer = await spans.traced_unary(run, request, context, service, method)
                else:
                    answer = await run(request, context)
            except BaseException as exc:
                count(context, exc)
                raise
            code = context.code()  # None: OK (count's work, inline for the common call)
            key = ok if code is None else (service, method, str(code.name))
            counts[key] = counts.get(key, 0) + 1
            return answer

        return call

    def streaming(behavior: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: ServicerContext) -> AsyncIterator[Any]:
            rid = ""
            if request_log.track and not probe:  # the call's own id: its messages carry theirs
                rid = request_log.new_id()
                context.set_trailing_metadata(((request_log.REQUEST_ID_HEADER, rid),))
                request_log.current.set((rid, path))
            try:
                answers = behavior(request, context)
                if request_log.access and not probe:  # the line inside the span: its trace
                    answers = _logged_stream(answers, context, path, rid)
                if tracing.on and spanned:
                    answers = spans.traced_stream(answers, context, service, method)
                if hasattr(answers, "__aiter__"):
                    async for answer in answers:
                        yield answer
                else:  # a coroutine that writes with context.write
                    await answers
            except BaseException as exc:
                count(context, exc)
                raise
            count(context, None)

        return call

    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **options)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **options)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), **options)
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), **options)


class CountedHandlers(grpc.GenericRpcHandler):
    """A server's generic handlers, asked in order, each method's handler counted.
    The generated ``add_*Servicer_to_server`` functions may register into it."""

    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []
        self.counts = grpc_counts()
        # method -> (the handler found, its counted wrapper): wrapped once per method
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self.handlers.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Newer stubs register their methods here too; the generic handlers suffice."""

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        for generic in self.handlers:
            found = generic.service(handler_call_details)
            if found is not None:
                break
        else:
            return None
        path = handler_call_details.method
        known = self._wrapped.get(path)
        if known is not None and known[0] is found:
            return known[1]
        # a new method, or a handler made for this call (TF Serving's before its first load)
        wrapped = counted(found, path, self.counts)
        self._wrapped[path] = (found, wrapped)
        return wrapped
