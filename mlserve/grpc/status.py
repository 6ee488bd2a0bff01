"""A server's error response as a gRPC status: one mapping for every gRPC service.

Status codes map to gRPC codes through ``protocol.errors.GRPC_CODES``; the message is
the body's ``error`` (the text a REST client reads).
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeAlias

import grpc

from mlserve.core.events import Response
from mlserve.protocol.errors import GRPC_CODES

__all__ = ["ServicerContext", "abort", "body_message", "grpc_code"]

# The context of a grpc.aio call, as the servicers see it.
ServicerContext: TypeAlias = grpc.aio.ServicerContext[Any, Any]


def grpc_code(status_code: int) -> grpc.StatusCode:
    """The gRPC code of an HTTP status (UNKNOWN for one without its own)."""
    code: grpc.StatusCode = getattr(grpc.StatusCode, GRPC_CODES.get(status_code, "UNKNOWN"))
    return code


def body_message(body: object) -> str:
    """The text of an error response's body: its ``error``, or the body itself."""
    return str(body.get("error", body)) if isinstance(body, dict) else str(body)


async def abort(context: ServicerContext, response: Response) -> NoReturn:
    """End the call with ``response``'s status and message (``context.abort`` raises)."""
    await context.abort(grpc_code(response.status_code), body_message(response.body))
    raise AssertionError("grpc's context.abort returned")  # it raises: never reached
