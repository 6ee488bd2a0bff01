"""TF Serving's gRPC services on a port, loaded by their first call.

Their stubs (``tensorflow-serving-api``) import TensorFlow: seconds of start-up
and about 600 MB per process. A gRPC port therefore answers TF Serving's
methods through this handler, which imports them (in a thread) when a TF
Serving client first calls, and from then on hands out the real handlers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

import grpc

from mlserve.grpc.status import ServicerContext

if TYPE_CHECKING:
    from mlserve.server.graph_server import GraphServer

__all__ = ["INSTALL", "TFServingLoader", "installed"]

logger = logging.getLogger("mlserve.grpc")

SERVICES = ("/tensorflow.serving.PredictionService/", "/tensorflow.serving.ModelService/")
INSTALL = "pip install 'mlserve[tensorflow]' and pip install --no-deps tensorflow-serving-api"


def installed() -> bool:
    """Whether the stubs' package is there (found, not imported)."""
    return importlib.util.find_spec("tensorflow_serving") is not None


class _Recorder:
    """Takes what the generated ``add_*Servicer_to_server`` functions register."""

    def __init__(self) -> None:
        self.handlers: list[grpc.GenericRpcHandler] = []

    def add_generic_rpc_handlers(self, handlers: Iterable[grpc.GenericRpcHandler]) -> None:
        self.handlers.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """Newer stubs register their methods here too; the generic handlers suffice."""


class TFServingLoader(grpc.GenericRpcHandler):
    """PredictionService and ModelService for ``server``, imported on first use."""

    def __init__(self, server: GraphServer) -> None:
        self.server = server
        self._handlers: list[grpc.GenericRpcHandler] | None = None
        self._error = ""
        self._lock = asyncio.Lock()

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        if not handler_call_details.method.startswith(SERVICES):
            return None
        if self._handlers is not None:
            return self._lookup(handler_call_details)

        async def first_call(request: bytes, context: ServicerContext) -> bytes:
            """Raw bytes in and out: the message types are not imported yet."""
            await self._load()
            handler = self._lookup(handler_call_details)
            if handler is None:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, self._error or "no such method")
                raise AssertionError("context.abort raises")  # never reached
            message = handler.request_deserializer(request)
            answer = await handler.unary_unary(message, context)
            return handler.response_serializer(answer)

        return grpc.unary_unary_rpc_method_handler(first_call)

    def _lookup(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        for handler in self._handlers or []:
            found = handler.service(handler_call_details)
            if found is not None:
                return found
        return None

    async def _load(self) -> None:
        async with self._lock:
            if self._handlers is None:
                self._handlers = await asyncio.to_thread(self._import)

    def _import(self) -> list[grpc.GenericRpcHandler]:
        try:
            from mlserve.grpc.tfserving import add_tfserving_services
        except ImportError as exc:
            self._error = f"TF Serving's gRPC API needs its stubs ({exc}): {INSTALL}"
            logger.warning("%s", self._error)
            return []
        recorder = _Recorder()
        add_tfserving_services(self.server, recorder)
        return recorder.handlers
