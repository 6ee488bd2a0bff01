"""Every error mlserve answers with, and the status it answers with.

The class carries its HTTP status; faces read ``exc.status_code`` and never
choose a code themselves. gRPC codes come from the one table below.

    MLServeError (500)
    ├── InvalidInput (400)         bad JSON, missing/malformed inputs, shape or datatype mismatch
    │   └── IllegalOperation (400) no such operation on a model
    ├── Unauthorized (401)
    ├── Forbidden (403)            model control (repository load/unload) is off
    ├── ModelNotFound (404)        unknown model, version or path
    ├── PayloadTooLarge (413)
    ├── TooManyRequests (429)
    ├── ModelError (500)           the model's own code raised
    ├── NotSupported (501)
    ├── ModelNotReady (503)
    └── Timeout (504)
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus

__all__ = [
    "Forbidden",
    "GRPC_CODES",
    "IllegalOperation",
    "InvalidInput",
    "MLServeError",
    "ModelError",
    "ModelNotFound",
    "ModelNotReady",
    "NotSupported",
    "PayloadTooLarge",
    "Timeout",
    "TooManyRequests",
    "Unauthorized",
    "error_body",
    "status_of",
    "unknown_model",
]


class MLServeError(Exception):
    """Base of every error with a defined answer."""

    status_code: HTTPStatus = HTTPStatus.INTERNAL_SERVER_ERROR


class InvalidInput(MLServeError):
    status_code = HTTPStatus.BAD_REQUEST


class IllegalOperation(InvalidInput):
    pass


class Unauthorized(MLServeError):
    status_code = HTTPStatus.UNAUTHORIZED


class Forbidden(MLServeError):
    status_code = HTTPStatus.FORBIDDEN


class ModelNotFound(MLServeError):
    status_code = HTTPStatus.NOT_FOUND


class PayloadTooLarge(MLServeError):
    status_code = HTTPStatus.REQUEST_ENTITY_TOO_LARGE


class TooManyRequests(MLServeError):
    status_code = HTTPStatus.TOO_MANY_REQUESTS


class ModelError(MLServeError):
    status_code = HTTPStatus.INTERNAL_SERVER_ERROR


class NotSupported(MLServeError):
    status_code = HTTPStatus.NOT_IMPLEMENTED


class ModelNotReady(MLServeError):
    status_code = HTTPStatus.SERVICE_UNAVAILABLE


class Timeout(MLServeError):
    status_code = HTTPStatus.GATEWAY_TIMEOUT


# HTTP status -> name of the grpc.StatusCode member (names keep grpc out of this module).
GRPC_CODES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "RESOURCE_EXHAUSTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_of(exc: BaseException) -> int:
    """The HTTP status an exception answers with: its class's; 501 for a hook a
    model does not implement (``NotImplementedError``); else 500."""
    if isinstance(exc, NotImplementedError):
        return int(HTTPStatus.NOT_IMPLEMENTED)
    return int(getattr(exc, "status_code", HTTPStatus.INTERNAL_SERVER_ERROR))


# Messages in Triton's words that Triton's client programs test with ``startswith``: the
# words come first, the class after them (docs/protocol.md#errors).
WORDS_FIRST = ("Request for unknown model", "failed to get model version")


def error_body(exc: BaseException, text: str | None = None) -> dict[str, str]:
    """The JSON error body (docs/protocol.md#errors): ``{"error": "<ExceptionClass>:
    <message>"}``, or ``"<message> (<ExceptionClass>)"`` for Triton's own words
    (``text``: the message to show, ``str(exc)`` by default)."""
    text = str(exc) if text is None else text
    if text.startswith(WORDS_FIRST):
        return {"error": f"{text} ({type(exc).__name__})"}
    return {"error": f"{type(exc).__name__}: {text}"}


def unknown_model(key: str, served: Iterable[str] = ()) -> ModelNotFound:
    """The 404 of ``m`` or ``m:v`` that no route serves, in Triton's words
    (docs/protocol.md#errors); mlrun's list of the ``served`` keys follows, which a 404
    on the wire leaves out."""
    served = list(served)
    name, _, version = key.partition(":")
    versions = [k.partition(":")[2] for k in served if k.partition(":")[0] == name]
    if version and not version.isdigit() and versions and all(v.isdigit() for v in versions):
        text = f"failed to get model version from specified version string '{version}'"
    elif version:
        text = f"Request for unknown model: '{name}' version {version} is not found"
    else:
        text = f"Request for unknown model: '{name}' is not found"
    if served:
        text += f", available models: {' | '.join(served)}"
    return ModelNotFound(text)
