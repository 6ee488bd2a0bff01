"""mlrun's nuclio entry point, so that a function written for mlrun runs unchanged.

mlrun's generated nuclio code calls ``nuclio_init_hook(context, globals(),
serving_subkind)`` from ``init_context`` and then
``context.mlrun_handler(context, event)`` for each event. The server is
mlserve's (one code path, docs/architecture.md#layers); this face answers in
mlrun's dialect, as those callers expect: an error is a 400 whose body is the error
text, and a model's ``/ready`` is 200 ``Model <m> is ready (event_id = <id>)`` or 408.
mlserve's own
handler (``mlserve.runtimes.nuclio:handler``) answers by the V2 protocol;
docs/migrating-from-mlrun.md lists the difference.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from mlserve.core.events import Event, Response
from mlserve.function.nuclio import SPEC_ENV, answer_pieces, to_event
from mlserve.server.graph_server import GraphServer

__all__ = [
    "mlrun_handler",
    "nuclio_init_hook",
    "serving_subkind",
    "v2_serving_handler",
    "v2_serving_streaming_handler",
]

# mlrun.runtimes.nuclio.serving.serving_subkind: the kind of a v2 serving function.
serving_subkind = "serving_v2"

_READY_SUFFIX = "/ready"


def nuclio_init_hook(context: Any, data: dict[str, Any], kind: str) -> None:
    """Build the server of ``SERVING_SPEC_ENV`` (mlrun's serving spec, or an mlserve
    function) with ``data`` (the caller's globals) as namespace, and set
    ``context.mlrun_handler``."""
    if kind != serving_subkind:
        raise ValueError(
            f"unsupported nuclio kind '{kind}': mlserve runs serving functions "
            f"(kind '{serving_subkind}'), not mlrun's v1 serving or jobs"
        )
    server, code, streaming = _server_from_env()
    namespace = {**code, **(data or {})}
    logger = getattr(context, "logger", None)
    server.init_states(
        None,
        namespace=namespace,
        logger=logger if hasattr(logger, "error") else None,
        is_mock=bool(getattr(context, "is_mock", False)),
    )
    server.init_object(namespace)
    context.mlrun_handler = v2_serving_streaming_handler if streaming else v2_serving_handler
    context._server = server
    if hasattr(context, "server"):
        context.server = server


def _server_from_env() -> tuple[GraphServer, dict[str, Any], bool]:
    """The server of the spec, the names of the function's own code (if it has any),
    and whether it streams (``fn.set_streaming()``, or mlrun's spec ``streaming``)."""
    text = os.environ.get(SPEC_ENV)
    if not text:
        raise RuntimeError(f"no function to serve: set {SPEC_ENV} to the serving spec (JSON)")
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"{SPEC_ENV} is not JSON: {exc}") from None
    if "metadata" in spec and "spec" in spec:  # an mlserve function (fn.to_dict())
        from mlserve.function import ServingFunction

        fn = ServingFunction.from_dict(spec)
        return fn.to_graph_server(), fn.namespace, bool(fn.spec.streaming)
    return GraphServer.from_dict(spec), {}, bool(spec.get("streaming"))


def mlrun_handler(context: Any, event: Any) -> Any:
    """Answer one event (a nuclio event or an mlserve ``MockEvent``) as mlrun would."""
    server: GraphServer = context._server
    event = _event_of(event)
    asked = (event.method, event.path, event.id)  # the router rewrites event.path
    return _reply(context, asked, server.run(event))


# mlrun's name of the handler ``nuclio_init_hook`` sets.
v2_serving_handler = mlrun_handler


async def v2_serving_streaming_handler(context: Any, event: Any) -> AsyncIterator[Any]:
    """The handler of a function with streaming on: each chunk of a streamed answer
    as it comes (a server-sent event), any other answer as ``mlrun_handler`` gives it."""
    server: GraphServer = context._server
    event = _event_of(event)
    asked = (event.method, event.path, event.id)
    response = await server.run_async(event)
    async for piece in answer_pieces(server, response):
        yield piece if isinstance(piece, bytes) else _reply(context, asked, response)


def _event_of(event: Any) -> Event:
    if not isinstance(event, Event):
        event = to_event(event)
    if event.body == b"":  # nuclio hands an empty HTTP body over as b""
        event.body = None
    return event


def _reply(context: Any, asked: tuple[str, str, str], response: Response) -> Any:
    status, body, content_type = _mlrun_answer(asked, response)
    make = getattr(context, "Response", Response)
    return make(
        body=body,
        content_type=content_type,
        status_code=status,
        headers=dict(response.headers),
    )


def _mlrun_answer(asked: tuple[str, str, str], response: Response) -> tuple[int, Any, str]:
    """(status, body, content type) as mlrun's handler gives them."""
    ready = _ready_answer(asked, response)
    if ready is not None:
        return ready
    if response.status_code < 400:
        return response.status_code, response.body, response.content_type
    return 400, _error_text(response.body), "text/plain"


def _ready_answer(asked: tuple[str, str, str], response: Response) -> tuple[int, Any, str] | None:
    method, path, event_id = asked
    if method != "GET" or not path.rstrip("/").endswith(_READY_SUFFIX):
        return None
    try:
        body = json.loads(response.body)
    except (TypeError, ValueError):
        return None
    if not isinstance(body, dict) or set(body) != {"name", "ready"}:
        return None  # /v2/health/ready and the like keep their answer
    if body["ready"]:
        text = f"Model {body['name']} is ready (event_id = {event_id})"
        return 200, text.encode(), "text/plain"
    return 408, b"model not ready", "text/plain"


def _error_text(body: Any) -> bytes:
    """mlserve's ``{"error": "<Class>: <message>"}`` as mlrun's plain-text body."""
    try:
        error = json.loads(body)["error"]
    except (TypeError, ValueError, KeyError):
        return body if isinstance(body, bytes) else str(body).encode()
    return str(error).encode()
