"""The gRPC servicer: each method builds an ``Event``, awaits
``GraphServer.run_async`` (the one code path) and translates the answer back.
Error statuses map to gRPC codes in ``grpc.status``.

Triton's extension RPCs (configuration, statistics, repository) go to the same
server-level routes as their REST twins (``server.extensions``); repository
load/unload answer PERMISSION_DENIED unless ``server.model_control`` is set.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from mlserve.core.events import Event, Response, Trigger
from mlserve.core.settings import FaceSettings
from mlserve.core.streams import ChunkStream
from mlserve.graph.traffic import ROUTING_HEADERS
from mlserve.grpc import convert
from mlserve.grpc.counting import CountedHandlers
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from mlserve.grpc.status import ServicerContext, abort, body_message
from mlserve.protocol.errors import Forbidden, InvalidInput, MLServeError
from mlserve.protocol.names import dot_name
from mlserve.server.extensions import one_model

if TYPE_CHECKING:
    from mlserve.core.tls import TLSSettings
    from mlserve.server.graph_server import GraphServer

__all__ = ["GRPC_MAX_STREAMS", "InferenceServicer", "start_grpc_server"]

GRPC_MAX_STREAMS = 100  # calls at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)

_TRIGGER = Trigger(kind="grpc", name="grpc")
logger = logging.getLogger("mlserve.grpc")


@functools.lru_cache(maxsize=1024)  # names repeat: a hit is one look-up in C, no checks
def _model_path(name: str, version: str) -> str:
    """The REST path of a model (and version) named in a request; a name or version
    that is not one plain path segment is INVALID_ARGUMENT, not another route."""
    check_model_name(name)
    if version:
        check_model_name(version, "version")
        return f"/v2/models/{name}/versions/{version}"
    return f"/v2/models/{name}"


@functools.lru_cache(maxsize=1024)  # one look-up per ModelInfer, not a look-up and a concatenation
def _infer_path(name: str, version: str) -> str:
    """The REST path of a model's inference (``_model_path`` + ``/infer``)."""
    return _model_path(name, version) + "/infer"


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """``inference.GRPCInferenceService`` over a GraphServer."""

    def __init__(self, server: GraphServer) -> None:
        self.server = server

    async def _call(
        self,
        context: ServicerContext,
        path: str,
        body: dict[str, Any] | None = None,
        ok: tuple[int, ...] = (),
    ) -> Response:
        method = "POST" if body is not None else "GET"
        event = Event(body=body, path=path, method=method, trigger=_TRIGGER)
        response: Response = await self.server.run_async(event)
        if response.status_code >= 300 and response.status_code not in ok:
            await abort(context, response)
        return response

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: ServicerContext
    ) -> pb.ServerLiveResponse:
        response = await self._call(context, "/v2/health/live")
        return pb.ServerLiveResponse(live=bool(response.body.get("live")))

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: ServicerContext
    ) -> pb.ServerReadyResponse:
        response = await self._call(context, "/v2/health/ready", ok=(503,))
        return pb.ServerReadyResponse(ready=response.status_code == 200)

    async def _model_call(
        self,
        context: ServicerContext,
        request: pb.ModelReadyRequest
        | pb.ModelMetadataRequest
        | pb.ModelConfigRequest
        | pb.ModelStatisticsRequest,
        tail: str = "",
        ok: tuple[int, ...] = (),
    ) -> Response:
        """GET the REST route ``tail`` of the model ``request.name`` / ``request.version``."""
        try:
            path = _model_path(request.name, request.version) + tail
        except InvalidInput as exc:
            await abort(context, self.server.error_response(exc))
        return await self._call(context, path, ok=ok)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: ServicerContext
    ) -> pb.ModelReadyResponse:
        response = await self._model_call(context, request, "/ready", ok=(503,))
        return pb.ModelReadyResponse(ready=response.status_code == 200)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: ServicerContext
    ) -> pb.ServerMetadataResponse:
        body = (await self._call(context, "/v2")).body
        return pb.ServerMetadataResponse(
            name=body["name"], version=body["version"], extensions=body.get("extensions", [])
        )

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: ServicerContext
    ) -> pb.ModelMetadataResponse:
        return convert.metadata_from_core((await self._model_call(context, request)).body)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: ServicerContext) -> bytes:
        """The response serialized already (``serialized`` sends it as it is)."""
        try:
            raw = not request.parameters or convert.raw_outputs(request)  # no call, usually
            body = await self._infer(request, headers=_route_headers(context))
            if isinstance(body, ChunkStream):  # a flow that streams: one answer cannot hold it
                await body.aclose()
                raise InvalidInput("the answer is a stream: call ModelStreamInfer")
            return convert.infer_response_bytes(body, raw)
        except MLServeError as exc:
            await abort(context, self._failure(exc))

    async def _infer(
        self,
        request: pb.ModelInferRequest,
        stream: bool = False,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One inference: the core's response body (a JSON object, or a ChunkStream on the
        model's ``infer_stream`` route or from a flow that streams); a failure raises the
        MLServeError of its status."""
        body = convert.infer_to_core(request)
        path = _infer_path(request.model_name, request.model_version)
        if stream:
            path += "_stream"
        event = Event(body=body, path=path, method="POST", trigger=_TRIGGER, headers=headers)
        response: Response = await self.server.run_async(event)
        if response.status_code >= 300:
            raise _ResponseError(response)
        return response.body

    async def ModelStreamInfer(
        self, requests: AsyncIterator[pb.ModelInferRequest], context: ServicerContext
    ) -> None:
        """Triton's stream (docs/serving.md#streams-over-grpc): the requests are answered one
        after another, in order, each with all its responses before the next starts; a
        failed request answers with its ``error_message`` and the stream goes on. Each
        response is written with ``context.write`` as it is made (no generator between
        the model's chunks and grpc: docs/performance.md#streaming-where-the-time-goes)."""
        headers = _route_headers(context)  # the call's, for each of its requests
        write = context.write
        async for request in requests:
            await self._answer_stream(request, headers, write)

    async def _answer_stream(
        self,
        request: pb.ModelInferRequest,
        headers: dict[str, str] | None,
        write: Callable[[Any], Awaitable[None]],
    ) -> None:
        """One request's responses, each written as it is made: a streamed answer's chunks
        (``triton_final_response`` false), then the empty final response when asked; any
        other answer as one response, final (Triton's decoupled and plain models)."""
        try:
            raw = convert.raw_outputs(request)
            empty_final = convert.empty_final_response(request)
            stream = self._streams(request.model_name, request.model_version)
            body = await self._infer(request, stream, headers)
            if not isinstance(body, ChunkStream):
                answer = convert.stream_response_bytes(body, raw, final=True)
        except MLServeError as exc:
            await write(convert.stream_error(request, body_message(self._failure(exc).body)))
            return
        if not isinstance(body, ChunkStream):
            await write(answer)
            return
        error: Exception | None = None
        try:
            while True:
                try:
                    chunk = await body.__anext__()
                    data = convert.stream_response_bytes(chunk, raw, final=False)
                except StopAsyncIteration:
                    break
                except Exception as exc:  # the model's, a timeout, or a chunk that is not tensors
                    error = exc
                    break
                await write(data)
        finally:  # also when the client cancels: the model's generator is closed
            await body.aclose()
        if error is not None:
            message = body_message(self.server.error_response(error).body)
            await write(convert.stream_error(request, message))
        elif empty_final:
            await write(convert.final_response_bytes(request))

    def _streams(self, name: str, version: str) -> bool:
        """Whether the model a request names streams (asked of its ``infer_stream`` route);
        False for a name no served model has (its ``infer`` route answers the 404)."""
        try:
            model = one_model(self.server, name, version or None)
        except MLServeError:
            return False
        is_streaming = getattr(model, "is_streaming", None)  # a V2ModelServer's
        return bool(is_streaming is not None and is_streaming())

    def _failure(self, exc: MLServeError) -> Response:
        """The error response of a failed inference (the core's own when it answered)."""
        return exc.response if isinstance(exc, _ResponseError) else self.server.error_response(exc)

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: ServicerContext
    ) -> pb.ModelConfigResponse:
        response = await self._model_call(context, request, "/config")
        return pb.ModelConfigResponse(config=convert.config_from_core(response.body))

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: ServicerContext
    ) -> pb.ModelStatisticsResponse:
        if request.name:
            response = await self._model_call(context, request, "/stats")
        else:  # every model (a version alone names none)
            response = await self._call(context, "/v2/models/stats")
        return convert.stats_from_core(response.body)

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: ServicerContext
    ) -> pb.RepositoryIndexResponse:
        body = {"ready": request.ready}
        response = await self._call(context, "/v2/repository/index", body)
        return convert.index_from_core(response.body)

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: ServicerContext
    ) -> pb.RepositoryModelLoadResponse:
        parameters = {key: _parameter(value) for key, value in request.parameters.items()}
        body = {"parameters": parameters} if parameters else {}
        await self._control(context, request.model_name, "load", body)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: ServicerContext
    ) -> pb.RepositoryModelUnloadResponse:
        await self._control(context, request.model_name, "unload")
        return pb.RepositoryModelUnloadResponse()

    async def _control(
        self, context: ServicerContext, name: str, action: str, body: dict[str, Any] | None = None
    ) -> None:
        """Load or unload ``name`` through the repository route, when model control is on."""
        try:
            if not self.server.model_control:
                raise Forbidden(
                    f"model {action} is off: start the server with explicit model control"
                )
            check_model_name(name)
        except MLServeError as exc:
            await abort(context, self.server.error_response(exc))
        await self._call(context, f"/v2/repository/models/{name}/{action}", body or {})

    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: ServicerContext
    ) -> pb.SystemSharedMemoryStatusResponse:
        answer = pb.SystemSharedMemoryStatusResponse()
        for region in (await self._shm_call(context, request.name, "status")).body:
            answer.regions[region["name"]].CopyFrom(
                pb.SystemSharedMemoryStatusResponse.RegionStatus(**region)
            )
        return answer

    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: ServicerContext
    ) -> pb.SystemSharedMemoryRegisterResponse:
        body = {"key": request.key, "offset": request.offset, "byte_size": request.byte_size}
        await self._shm_call(context, request.name, "register", body)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: ServicerContext
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        await self._shm_call(context, request.name, "unregister", {})
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: ServicerContext
    ) -> pb.CudaSharedMemoryStatusResponse:
        await self._shm_call(context, request.name, "status", kind="cuda")  # lists none
        return pb.CudaSharedMemoryStatusResponse()

    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: ServicerContext
    ) -> pb.CudaSharedMemoryRegisterResponse:
        await self._shm_call(context, request.name, "register", {}, kind="cuda")  # a 501
        return pb.CudaSharedMemoryRegisterResponse()

    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: ServicerContext
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        await self._shm_call(context, request.name, "unregister", {}, kind="cuda")
        return pb.CudaSharedMemoryUnregisterResponse()

    async def _shm_call(
        self,
        context: ServicerContext,
        name: str,
        action: str,
        body: dict[str, Any] | None = None,
        kind: str = "system",
    ) -> Response:
        """The shared-memory REST route of ``action`` (docs/protocol.md#system-shared-memory)."""
        if "/" in name:
            message = f"illegal shared memory region name {name!r}: it holds a '/'"
            await abort(context, self.server.error_response(InvalidInput(message)))
        region = f"/region/{name}" if name else ""
        return await self._call(context, f"/v2/{kind}sharedmemory{region}/{action}", body)


def _route_headers(context: ServicerContext) -> dict[str, str] | None:
    """The routing metadata of a call (``x-mlserve-route-key``, ``x-mlserve-route``), as
    the headers of its event (docs/graphs.md#sticky-variants)."""
    found = None
    for key, value in context.invocation_metadata() or ():
        if key in ROUTING_HEADERS:
            found = found or {}
            found[key] = value if isinstance(value, str) else value.decode("latin-1")
    return found


def _parameter(value: pb.ModelRepositoryParameter) -> Any:
    """A load parameter's value (``config`` is a string_param)."""
    which = value.WhichOneof("parameter_choice")
    return getattr(value, which) if which else None


def check_model_name(name: str, what: str = "model name") -> None:
    """A model name (or version) from a request: one plain path segment, never a way
    out of the repository or to another route (no separators, NUL, ``.`` or ``..``, nor
    ``..:1``)."""
    if not name or dot_name(name) or "/" in name or "\\" in name or "\x00" in name:
        raise InvalidInput(f"illegal {what} {name!r}")


class _ResponseError(MLServeError):
    """A non-2xx answer of the core, carried as an exception through a stream."""

    def __init__(self, response: Response) -> None:
        super().__init__(body_message(response.body))
        self.status_code = response.status_code  # type: ignore[assignment]
        self.response = response


def _add_tfserving(server: GraphServer, handlers: CountedHandlers) -> bool:
    """TF Serving's services beside V2's, when ``tensorflow-serving-api`` is installed;
    imported by their first call (their stubs import TensorFlow)."""
    from mlserve.grpc.tfserving_loader import INSTALL, TFServingLoader, installed

    if not installed():
        logger.warning("TF Serving gRPC API off (no tensorflow_serving): %s", INSTALL)
        return False
    handlers.add_generic_rpc_handlers((TFServingLoader(server),))
    return True


def serialized(message: Any) -> bytes:
    # (bytes or a protobuf message: ``type() is`` does not narrow a union for mypy)
    """A response as it goes on the wire: ModelInfer's comes serialized already."""
    return message if type(message) is bytes else message.SerializeToString()


def _model_infer(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """ModelInfer and ModelStreamInfer with a serializer that sends the bytes they answer
    as they are (the generated registration would serialize a message)."""
    options: dict[str, Any] = {
        "request_deserializer": pb.ModelInferRequest.FromString,
        "response_serializer": serialized,
    }
    handlers = {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(servicer.ModelInfer, **options),
        "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(
            servicer.ModelStreamInfer, **options
        ),
    }
    return grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers)


async def start_grpc_server(
    server: GraphServer,
    host: str,
    port: int,
    services: str = "v2,tfserving",
    settings: FaceSettings | None = None,
    tls: TLSSettings | None = None,
) -> Any:
    """Start a ``grpc.aio`` server for ``server`` on ``host:port``, in the running loop.

    ``services``: "v2" (Open Inference), "tfserving" (TF Serving's
    PredictionService and ModelService, when installed), or both. ``settings``: the
    faces' auth (an interceptor covers every service) and body limit (the largest
    message received). ``tls``: serve TLS with its certificate; with its client CA,
    a call without a client certificate it signed fails the handshake (docs/security.md#tls).
    """
    from mlserve.grpc.auth import AuthInterceptor

    settings = settings or FaceSettings()
    grpc_server = grpc.aio.server(
        interceptors=[AuthInterceptor(settings)] if settings.auth_enabled else [],
        options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.max_send_message_length", -1),
            # memory per connection (docs/security.md#memory-per-connection): HTTP/2 flow
            # control keeps an answer its client does not read here, one per call, and a
            # connection runs at most this many calls at once (more are refused)
            ("grpc.max_concurrent_streams", GRPC_MAX_STREAMS),
            ("grpc.keepalive_time_ms", 60_000),  # ping a connection with calls each minute:
            ("grpc.keepalive_timeout_ms", 20_000),  # a peer gone silent is cut
        ],
    )
    handlers = CountedHandlers()  # every call's status, for /metrics
    if "v2" in services:
        servicer = InferenceServicer(server)
        handlers.add_generic_rpc_handlers((_model_infer(servicer),))  # asked first
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, handlers)
    if "tfserving" in services and not _add_tfserving(server, handlers) and "v2" not in services:
        raise RuntimeError("the TF Serving gRPC port needs tensorflow-serving-api installed")
    grpc_server.add_generic_rpc_handlers((handlers,))
    address = f"{host}:{port}"
    if tls is not None and tls.enabled:
        key, chain, client_ca = tls.pem()
        credentials = grpc.ssl_server_credentials(
            [(key, chain)], root_certificates=client_ca, require_client_auth=tls.mutual
        )
        bound = grpc_server.add_secure_port(address, credentials)
    else:
        bound = grpc_server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot bind the gRPC port {host}:{port}")
    await grpc_server.start()
    return grpc_server
