"""``GraphServer``: one code path from an Event to a Response, for every face
(docs/architecture.md#one-request-face-to-model-and-back).

The core is ``run_async``. The mock server's ``test()`` and the sync ``run()``
answer a graph of plain (sync) code in the caller's thread, driving the same
dispatch synchronously (mlserve.server.inline); a graph with any async part
reaches ``run_async`` through a background event loop, so a notebook (which
has a running loop of its own) and a script behave the same.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np

from mlserve.core import tracing
from mlserve.core.aio import BackgroundLoop, drive, run_in_threadpool
from mlserve.core.context import GraphContext
from mlserve.core.deadlines import with_timeout
from mlserve.core.events import Event, Response, Trigger
from mlserve.core.handlers import handlers_met, handlers_run_inline
from mlserve.core.hidden import first_shown, generic_text, random_error_id, text_error_id
from mlserve.core.limits import RequestTimeout, ServerLimits, request_timeout
from mlserve.core.loads import loads_in_parallel
from mlserve.core.streams import ChunkStream
from mlserve.graph.steps import BaseStep, step_from_dict
from mlserve.graph.traffic import FORCE_HEADER
from mlserve.protocol.errors import InvalidInput, ModelNotFound, error_body, status_of
from mlserve.protocol.forms import parse_json_body
from mlserve.protocol.names import target_error
from mlserve.protocol.shm import SharedMemoryRegions
from mlserve.protocol.tensors import (
    BINARY_HEADER,
    RAW,
    dumps,
    join_binary_body,
    loads,
    split_binary_body,
)
from mlserve.server.console import install as install_console
from mlserve.server.extensions import install as install_extensions
from mlserve.server.generate import generate_handler
from mlserve.server.inline import graph_runs_inline
from mlserve.server.methods import method_refusal
from mlserve.server.quiet import LineBudget, model_in
from mlserve.server.readiness import unserved_readiness
from mlserve.server.serving import ModelRepository, ServerHandler
from mlserve.server.shared_memory import handle as shared_memory_handler
from mlserve.server.shared_memory import place_outputs, take_inputs

__all__ = [
    "GraphServer",
    "ServerHandler",
    "ServingRequestError",
    "StepResponse",
    "create_graph_server",
    "encode_response",
    "encode_response_async",
]

logger = logging.getLogger("mlserve.server")

# Bodies longer than this are parsed on a worker thread, off the event loop.
OFF_LOOP_BYTES = 256 * 1024


class ServingRequestError(RuntimeError):
    """A ``test()`` request answered with a status of 300 or more."""

    def __init__(self, status_code: int, body: object) -> None:
        super().__init__(f"failed ({status_code}): {_body_text(body)}")
        self.status_code = status_code
        self.body = body


class StepResponse(dict[str, Any]):
    """A Response a step answered with, as ``test()`` returns it: its dict body,
    which also carries ``status_code``, ``content_type``, ``headers`` and ``body``
    as mlrun's Response object (``resp.status_code``) and mlserve's body
    (``resp["ready"]``) are both read."""

    status_code: int
    content_type: str
    headers: dict[str, str]

    @classmethod
    def of(cls, response: Response) -> Any:
        """The body as a StepResponse when it is a dict, else the Response itself."""
        if not isinstance(response.body, dict):
            return response
        answer = cls(_as_sent(response))
        answer.status_code = response.status_code
        answer.content_type = response.content_type
        answer.headers = dict(response.headers)
        return answer

    @property
    def body(self) -> dict[str, Any]:
        return dict(self)


def _body_text(body: object) -> str:
    """A response body as its text on the wire (JSON for a structure)."""
    if isinstance(body, (bytes, bytearray)):
        return bytes(body).decode("utf-8", errors="replace")
    if isinstance(body, str):
        return body
    try:
        return json.dumps(body)
    except (TypeError, ValueError):
        return repr(body)


class GraphServer:
    """Serves a graph in-process: the mock server of ``fn.to_mock_server()``.

    ``model_control``: Triton's ``--model-control-mode=explicit``; the repository
    load/unload APIs (V2 REST and gRPC, TF Serving's ModelService) answer Forbidden
    unless it is set. ``limits``: the request timeout, per-model concurrency and
    queue, and drain timeout (docs/security.md#limits); ``ServerLimits.from_env()``
    when None.
    ``hide_errors``: a 5xx's text becomes a generic message with an error id (the
    text is logged; docs/security.md#errors-without-leaks).

    ``version``, ``functions``, ``graph_initializer``, ``error_stream``,
    ``tracking_policy``, ``secret_sources`` and ``model_endpoint_creation_task_name``
    are accepted for mlrun compatibility (mlrun's ``GraphServer`` takes them);
    ``tracking_policy`` is read as ``tracking`` when that is not given (as
    ``from_dict`` does), and mlserve has no use for the others. They are not kept:
    as attributes they cost each HTTP request about 1% more instructions
    (docs/performance.md#the-re-layering-before-and-after).
    """

    kind = "server"

    def __init__(
        self,
        graph: BaseStep | dict[str, Any] | None = None,
        parameters: dict[str, Any] | None = None,
        load_mode: str | None = None,
        function_uri: str | None = None,
        verbose: bool = False,
        current_function: str | None = None,
        default_content_type: str | None = None,
        track_models: bool = False,
        tracking: dict[str, Any] | None = None,
        project: str = "default",
        function_name: str = "",
        function_tag: str = "",
        model_control: bool = False,
        limits: ServerLimits | None = None,
        hide_errors: bool = False,
        # accepted for mlrun compatibility:
        version: str | None = None,
        functions: dict[str, Any] | None = None,
        graph_initializer: str | Callable[..., Any] | None = None,
        error_stream: str | None = None,
        tracking_policy: dict[str, Any] | None = None,
        secret_sources: list[dict[str, Any]] | None = None,
        model_endpoint_creation_task_name: str | None = None,
    ) -> None:
        self.graph = step_from_dict(graph) if isinstance(graph, dict) else graph
        self.parameters = dict(parameters or {})
        self.load_mode = load_mode or "sync"
        self.function_uri = function_uri or f"{project}/{function_name}" + (
            f":{function_tag}" if function_tag else ""
        )
        self.verbose = verbose
        self.current_function = current_function
        self.default_content_type = default_content_type
        self.track_models = track_models
        self.tracking = dict(tracking or tracking_policy or {})
        self.project = project
        self.function_name = function_name
        self.function_tag = function_tag
        self.model_control = bool(model_control)
        self.limits = limits or ServerLimits.from_env()
        self.draining = False  # set at SIGTERM: readiness answers 503 from then on
        self.hide_errors = bool(hide_errors)
        # server.repository: set at init_object (mlserve.server.extensions)
        self.repository: ModelRepository | None = None
        # Triton's system shared-memory regions, server-wide (docs/protocol.md#system-shared-memory)
        self.shared_memory = SharedMemoryRegions()
        self.context = GraphContext(
            self.parameters,
            verbose=verbose,
            server=self,
            project=project,
            current_function=current_function,
        )
        self.handlers: list[ServerHandler] = []
        self._met: dict[tuple[str, str], tuple[ServerHandler, ...]] = {}  # per (method, path)
        self._shutdown_callbacks: list[Callable[[], None]] = []
        self._loop = BackgroundLoop()
        self._inline: bool | None = None  # whether the graph is all sync code (on first call)

    def add_handler(self, handler: ServerHandler) -> None:
        """Answer some paths at the server level, before the graph (mock and
        network faces alike)."""
        self.handlers.append(handler)
        self._met.clear()

    def on_shutdown(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` at ``wait_for_completion()`` (shutdown): flush
        streams, stop watchers."""
        self._shutdown_callbacks.append(callback)

    # ---- description -----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The server's spec, as mlrun writes it into ``SERVING_SPEC_ENV``."""
        struct: dict[str, Any] = {
            "version": "v2",
            "parameters": self.parameters,
            "graph": self.graph.to_dict() if self.graph is not None else None,
            "load_mode": self.load_mode,
            "function_uri": self.function_uri,
            "verbose": self.verbose,
            "default_content_type": self.default_content_type,
            "track_models": self.track_models,
            "tracking": self.tracking,
        }
        return {key: value for key, value in struct.items() if value not in (None, "", {}, False)}

    @classmethod
    def from_dict(cls, struct: dict[str, Any]) -> GraphServer:
        """A server from its spec (``to_dict()``, or mlrun's serving spec: keys
        mlserve has no use for, such as ``functions`` or ``secret_sources``, are ignored)."""
        uri = str(struct.get("function_uri") or "")
        project, _, name = uri.rpartition("/")
        name, _, tag = name.partition(":")
        return cls(
            graph=struct.get("graph"),
            parameters=struct.get("parameters"),
            load_mode=struct.get("load_mode"),
            function_uri=uri or None,
            verbose=bool(struct.get("verbose", False)),
            default_content_type=struct.get("default_content_type"),
            track_models=bool(struct.get("track_models", False)),
            tracking=struct.get("tracking") or struct.get("tracking_policy"),
            project=project or "default",
            function_name=name,
            function_tag=tag,
        )

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    # ---- lifecycle -------------------------------------------------------------

    def init_states(
        self,
        context: GraphContext | None = None,
        namespace: dict[str, Any] | None = None,
        logger: logging.Logger | None = None,
        is_mock: bool = False,
        **kwargs: object,
    ) -> None:
        """Prepare the context user code will see."""
        if context is not None:
            self.context = context
            context.server = self
        if logger is not None:
            self.context.logger = logger
        self.context.is_mock = is_mock
        self.context.root = self.graph
        self.namespace = namespace or {}

    def init_object(self, namespace: dict[str, Any] | None = None) -> None:
        """Build the graph's live objects and load the models."""
        if self.graph is None:
            raise ValueError("no models or steps were set, use fn.set_topology() or fn.add_model()")
        self._inline = None
        # the models load side by side (docs/serving.md#start-up-loading-the-models)
        with loads_in_parallel():
            self.graph.init_object(
                self.context, namespace or getattr(self, "namespace", {}), self.load_mode
            )
        install_extensions(self)
        install_console(self)  # the web console (docs/console.md)
        from mlserve.server.rollout import watch_rollouts  # loaded with a server, not an import

        watch_rollouts(self)  # docs/graphs.md#rolling-back-or-promoting-a-canary
        if self.track_models or self.tracking.get("enable_tracking"):
            from mlserve.monitoring import setup

            setup(self)  # the model-log stream and endpoint records (docs/monitoring.md)
        from mlserve.server.tfserving import tfserving_handler  # TF Serving's /v1 REST API

        self.add_handler(tfserving_handler)
        if generate_handler not in self.handlers:  # Triton's generate extension
            self.add_handler(generate_handler)
        if shared_memory_handler not in self.handlers:
            self.add_handler(shared_memory_handler)
            self.on_shutdown(self.shared_memory.close)

    def iter_models(self) -> Any:
        return self.graph.iter_models() if self.graph is not None else iter(())

    def wait_for_completion(self) -> None:
        """Finish what runs in the background (as at shutdown)."""
        wait = getattr(self.graph, "wait_for_completion", None)
        if wait is not None:
            wait()
        for callback in self._shutdown_callbacks:
            callback()

    # ---- requests ----------------------------------------------------------------

    async def run_async(self, event: Event) -> Response:
        """Answer one event; every error becomes the Response of its class."""
        return (await self._answer(event))[0]

    async def _answer(self, event: Event, inline: bool = False) -> tuple[Response, bool]:
        """The Response, and whether a step answered with that Response object itself.

        ``inline``: nothing on the event's path suspends (``runs_inline``); the
        caller drives this coroutine in its own thread and the graph runs through
        its sync API. A deadline cannot interrupt a call in the caller's thread:
        one that ran past it answers the same 504, once it ends."""
        if self.draining and event.method == "GET" and (event.path or "").endswith("/ready"):
            stopping = {"ready": False, "error": "the server is stopping"}
            return Response(stopping, status_code=503), False
        path = event.path  # the router rewrites it to the operation: the log names the request's
        try:
            if _is_big_body(event.body):  # parsed before the handlers (TF Serving's)
                if inline:
                    self._parse_body(event)
                else:  # off the loop, so that health checks never wait on it
                    await run_in_threadpool(self._parse_body, event)
            for handler in self._handlers_met(event):
                answer = await handler(self, event)
                if answer is not None:
                    return answer, False
            self._parse_body(event)
            regions = self.shared_memory  # no region registered: one attribute read
            in_regions = take_inputs(regions, event.body) if regions.registered else None
            timeout = request_timeout(self.limits, event)
            if inline:
                started = time.monotonic()
                event = self.graph.run(event)  # type: ignore[union-attr]
                if timeout and time.monotonic() - started > timeout:
                    raise RequestTimeout(f"the request took longer than {timeout:g} s")
            else:
                run = self.graph.run_async(event)  # type: ignore[union-attr]
                event = await with_timeout(run, timeout)
        except Exception as exc:
            if isinstance(exc, ModelNotFound) and event.method == "GET":
                unserved = unserved_readiness(self.repository, path or "")
                if unserved is not None:  # known, not served: ready false, as Triton
                    return unserved, False
            return self.error_response(exc, path), False
        body = event.body
        if isinstance(body, Response):
            return body, True
        if in_regions and not isinstance(body, ChunkStream):  # a stream's chunks go as sent
            try:
                body = place_outputs(self.shared_memory, body, in_regions)
            except Exception as exc:
                return self.error_response(exc, path), False
        if type(body) is dict and "parameters" in body:  # the variant that answered, named
            return Response(body, 200, "application/json", _route_header(body)), False
        return Response(body, 200, _content_type_of(body)), False

    def graph_changed(self) -> None:
        """Routes were loaded or unloaded at run time: ask again whether the graph is all sync."""
        self._inline = None

    def runs_inline(self, event: Event) -> bool:
        """Whether ``event`` can be answered in the caller's thread: the graph is
        all sync code and no server handler may suspend for it."""
        inline = self._inline
        if inline is None:
            inline = self._inline = graph_runs_inline(self.graph)
        return inline and handlers_run_inline(self._handlers_met(event), event)

    def _handlers_met(self, event: Event) -> tuple[ServerHandler, ...]:
        """The handlers ``event`` is offered to, chosen once per (method, path)."""
        key = (event.method, event.path or "")
        met = self._met.get(key)
        if met is None:
            if len(self._met) >= 1024:  # clients repeat their paths; a scan never grows it
                self._met.clear()
            met = self._met[key] = handlers_met(self.handlers, *key)
        return met

    def _answer_sync(self, event: Event) -> tuple[Response, bool]:
        """``_answer`` from a sync caller: in its thread when it can, else on the loop."""
        if self.runs_inline(event):
            return drive(self._answer(event, inline=True))
        return self._loop.run(self._answer(event))

    def run(self, event: Event, context: object = None, get_body: bool = False) -> Any:
        """Answer one event synchronously: the body (``get_body``) or an encoded Response.
        A streamed answer comes gathered: its body is the list of its chunks (an error
        mid-stream answers as an error before it)."""
        response = self._answer_sync(event)[0]
        if isinstance(response.body, ChunkStream):
            response = self._gathered(response)
        if get_body and response.status_code < 300:
            return response.body
        if get_body:
            return response
        return encode_response(response)

    def answer(self, event: Event) -> Response:
        """Answer one event synchronously, as ``run`` does, but not encoded and a streamed
        answer not gathered: its body is the ChunkStream (read it with ``read_stream``)."""
        return self._answer_sync(event)[0]

    def read_stream(self, stream: ChunkStream) -> Iterator[Any]:
        """A streamed answer's chunks for a sync caller, pulled on the loop the server's
        sync calls use; leaving early closes the stream."""
        return stream.iterate(self._loop.run)

    def test(
        self,
        path: str = "/",
        body: object = None,
        method: str = "",
        headers: dict[str, Any] | None = None,
        content_type: str | None = None,
        silent: bool = False,
        get_body: bool = True,
        event_id: str | None = None,
        trigger: Trigger | str | None = None,
        trace: bool = False,
        **kwargs: object,
    ) -> Any:
        """Send a request through the graph, as the HTTP face would: a target or a
        method the faces refuse is refused alike (400, 405 with ``Allow``). With
        ``trace`` (and tracing on) the call is a ``test {path}`` server span, continuing
        a ``traceparent`` in ``headers`` (docs/observability.md#tracing).

        Returns the body (as the HTTP face would send it) when ``get_body``;
        when a step answered with a Response object (a model's ``/ready``), its
        status travels with it (``StepResponse``), as mlrun's mock server
        returns that Response. A status of 300 or more raises
        ``ServingRequestError`` (a RuntimeError) unless ``silent``, which
        returns the Response. A streamed answer is a generator of its chunks, as
        mlrun's mock server returns it (``get_body=False``: the encoded Response of
        the chunks gathered in a list).
        """
        if self.graph is None:
            raise ValueError("no models or steps were set, use fn.set_topology() or fn.add_model()")
        target, _, query = path.partition("?")
        path = unquote(target) if "%" in target else target  # as an ASGI server hands it over
        method = (method or "").upper()
        # positional: a call's keyword names cost a lookup each
        event = Event(body, content_type, headers, method, path, event_id, trigger, query=query)
        refused = target_error(target.encode(), event.path)  # as the faces
        not_allowed = None if refused else method_refusal(event.method, event.path)
        if refused is not None:
            response, from_step = self.error_response(InvalidInput(refused)), False
        elif not_allowed is not None:
            response, from_step = not_allowed, False
        else:
            if event.method == "HEAD":  # answered as GET, as the faces answer it
                event.method = "GET"
            if trace and tracing.on:
                response, from_step = self._traced_test(event)
            else:
                response, from_step = self._answer_sync(event)
        sent = None
        if from_step and get_body and response.status_code < 300:
            return StepResponse.of(response)
        if isinstance(response.body, ChunkStream):
            if get_body:
                return self._chunks(response.body)
            response = self._gathered(response)
        if response.status_code < 300:
            try:
                sent = _as_sent(response)
            except TypeError as exc:
                response = _unsendable(exc)
        if response.status_code >= 300 and not silent:
            raise ServingRequestError(response.status_code, response.body)
        if not get_body:
            return encode_response(response)
        if response.status_code >= 300:
            return response
        return sent

    def _traced_test(self, event: Event) -> tuple[Response, bool]:
        """``_answer_sync`` inside a ``test {path}`` server span."""
        path = event.path
        attributes = {"http.request.method": event.method, "url.path": path}
        with tracing.server_span(f"test {path}", event.headers, attributes) as current:
            response, from_step = self._answer_sync(event)
            tracing.set_status(current, response.status_code)
        return response, from_step

    def _chunks(self, stream: ChunkStream) -> Iterator[Any]:
        """A streamed answer as mlrun's mock server hands it: a generator of the chunks;
        an error mid-stream raised after the chunks before it, as storey's StreamingError
        with the text an error answer has (``"<class>: <message>"``)."""
        try:
            yield from self.read_stream(stream)
        except Exception as exc:
            from storey.dtypes import StreamingError  # a dependency; loaded when it is needed

            shown = self.error_response(exc).body  # --hide-errors holds here too
            raise StreamingError(shown["error"]) from exc

    def _gathered(self, response: Response) -> Response:
        """A streamed Response with its chunks gathered in a list, or the error that
        ended the stream, answered as an error."""
        stream: ChunkStream = response.body
        try:
            chunks = list(self.read_stream(stream))
        except Exception as exc:
            return self.error_response(exc)
        return Response(chunks, response.status_code, "application/json", response.headers)

    # ---- helpers -----------------------------------------------------------------

    def _parse_body(self, event: Event) -> None:
        event.content_type = event.content_type or self.default_content_type or ""
        body = event.body
        if not isinstance(body, (str, bytes, bytearray, memoryview)):
            return
        if not body:  # an empty body is no body, as the HTTP face hands it over
            event.body = None
            return
        header_length = _header(event.headers, BINARY_HEADER.lower())
        if header_length is not None:
            data = body.encode() if isinstance(body, str) else bytes(body)  # bytes(str) fails
            event.body = split_binary_body(data, _int_header(header_length))
            return
        event.body = parse_json_body(body, event.content_type)

    def error_response(self, exc: BaseException, path: str = "") -> Response:
        """The Response of a failed request (``path``: the request's, for the log)."""
        status = status_of(exc)
        text = str(exc)
        if status == 404:  # a 404 never lists the served models (mlrun's message does)
            text = text.partition(", available models:")[0]
        body: dict[str, Any] = error_body(exc, text)
        shown = self.log_error(exc, status, body["error"], path)
        if shown is not None:
            return Response({"error": shown}, status_code=status)
        if self.verbose:
            body["traceback"] = "".join(traceback.format_exception(exc))
        retry_after = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
        return Response(body, status_code=status, headers=headers)

    def log_error(self, exc: BaseException, status: int, text: str, path: str = "") -> str | None:
        """Log a failed request (docs/serving.md#errors-in-the-log): a fault (a 5xx
        other than 501, 503 and 504) with its traceback; a client error or an expected
        5xx as one line, a few a second. Returns what the client reads in place of
        ``text`` under ``hide_errors`` (a 5xx; docs/security.md#errors-without-leaks),
        else None."""
        hide = self.hide_errors and status >= 500
        if status >= 500 and status not in EXPECTED_5XX:
            error_id = random_error_id() if hide else ""
            said = f" (error id {error_id})" if hide else ""
            logger.error("request failed%s: %s\n%s", said, text, user_traceback(exc).rstrip())
            return generic_text(error_id) if hide else None
        error_id = text_error_id(text) if hide else ""
        first = bool(error_id) and first_shown(error_id)  # its text is logged once, whole
        left_out = ERROR_LINES.take((status, model_in(path)), force=first)
        if left_out is not None:
            logger.log(
                logging.INFO if status < 500 else logging.WARNING,
                "%s answered %d%s%s%s",
                path or "a request",
                status,
                f" (error id {error_id})" if error_id else "",
                f": {text}" if first or not error_id else "",
                f" ({left_out} more like it left out)" if left_out else "",
            )
        return generic_text(error_id) if hide else None


# A 5xx that is no fault of the server or the model's code: one line, no traceback.
EXPECTED_5XX = frozenset({501, 503, 504})  # not implemented, not ready, past the deadline
ERROR_LINES = LineBudget()  # the lines of client errors, for the whole process


_PACKAGE = str(Path(__file__).resolve().parents[1])


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` and its causes without mlserve's own frames (the
    user's code is what failed); all frames when none are the user's."""
    formatted = traceback.TracebackException.from_exception(exc)
    part: traceback.TracebackException | None = formatted
    while part is not None:
        users = [frame for frame in part.stack if not frame.filename.startswith(_PACKAGE)]
        if users:
            part.stack = traceback.StackSummary.from_list(users)
        part = part.__cause__ or (None if part.__suppress_context__ else part.__context__)
    return "".join(formatted.format())


def _is_big_body(body: object) -> bool:
    """A body parsed before the server's handlers (off the loop, on the loop path)."""
    return isinstance(body, (str, bytes, bytearray, memoryview)) and len(body) > OFF_LOOP_BYTES


def _content_type_of(body: object) -> str:
    """What a body the graph returned is sent as: text and bytes are not JSON."""
    if type(body) is dict:  # the usual answer, in one check
        return "application/json"
    if isinstance(body, str):
        return "text/plain"
    if isinstance(body, (bytes, bytearray, memoryview)):
        return "application/octet-stream"
    if isinstance(body, ChunkStream):  # each face writes its chunks as they come
        return ChunkStream.media_type
    return "application/json"


def _route_header(body: dict[str, Any]) -> dict[str, str] | None:
    """The ``x-mlserve-route`` header of an answer a weighted route gave
    (docs/graphs.md#rolling-out-a-new-model)."""
    parameters = body["parameters"]
    if type(parameters) is dict and "route" in parameters:
        return {FORCE_HEADER: str(parameters["route"])}
    return None


def _header(headers: dict[str, Any], name: str) -> Any:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _int_header(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"header {BINARY_HEADER} must be an integer, got {value!r}") from None


def encode_response(response: Response) -> Response:
    """The Response with its body as bytes, as a face sends it."""
    body = response.body
    if isinstance(body, (bytes, bytearray)):
        return response
    if isinstance(body, str):
        return Response(
            body.encode(),
            response.status_code,
            response.content_type or "text/plain",
            response.headers,
        )
    if isinstance(body, dict) and _has_raw_outputs(body):
        data, header_length = join_binary_body(body)
        headers = {**response.headers, BINARY_HEADER: str(header_length)}
        return Response(data, response.status_code, "application/octet-stream", headers)
    try:
        data = dumps(body)
    except TypeError as exc:
        return encode_response(_unsendable(exc))
    return Response(data, response.status_code, "application/json", response.headers)


def encodes_off_loop(response: Response) -> bool:
    """Whether ``encode_response`` would hold the event loop: big tensors are
    written in the worker pool (``encode_response_async``)."""
    return isinstance(response.body, dict) and _is_big(response.body)


async def encode_response_async(response: Response) -> Response:
    """``encode_response``; a response with big tensors is written off the event loop."""
    if encodes_off_loop(response):
        return await run_in_threadpool(encode_response, response)
    return encode_response(response)


def _is_big(body: dict[str, Any]) -> bool:
    outputs = body.get("outputs")
    if not isinstance(outputs, list):
        return False
    for obj in outputs:
        if isinstance(obj, dict):
            data = obj.get("data")
            if isinstance(data, list):
                if len(data) > 4096:
                    return True
            elif isinstance(data, np.ndarray):
                return True
    return False


def _unsendable(exc: TypeError) -> Response:
    """A graph answer that is not JSON (an object a step returned) is a 500, not a crash."""
    logger.error("the graph's answer cannot be sent: %s", exc)
    return Response(error_body(exc), status_code=500)


def _has_raw_outputs(body: dict[str, Any]) -> bool:
    outputs = body.get("outputs")
    if isinstance(outputs, list):
        for output in outputs:
            if isinstance(output, dict) and RAW in output:  # (a loop: no generator per call)
                return True
    return False


def _as_sent(response: Response) -> Any:
    """The body as a client decodes it from the wire: JSON round-tripped."""
    body = response.body
    if isinstance(body, (bytes, bytearray, str)) or (
        isinstance(body, dict) and _has_raw_outputs(body)
    ):
        return body
    return loads(dumps(body))


def create_graph_server(
    graph: BaseStep | dict[str, Any] | None = None,
    parameters: dict[str, Any] | None = None,
    load_mode: str | None = None,
    verbose: bool = False,
    current_function: str | None = None,
    **kwargs: Any,
) -> GraphServer:
    """A GraphServer for ``graph`` (mlrun's ``create_graph_server``); ``kwargs`` are
    GraphServer's other parameters."""
    return GraphServer(
        graph, parameters, load_mode, verbose=verbose, current_function=current_function, **kwargs
    )
