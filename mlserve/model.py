"""``V2ModelServer``: the class a user subclasses to serve one model (docs/models.md).

The user writes ``load()`` and ``predict()``; everything else here turns one
event into one call of those hooks and one answer:

    preprocess -> validate -> predict | explain -> postprocess

The dispatch is written once, as a coroutine. The sync API (``do_event``)
drives it synchronously; the async API (``do_event_async``) runs it on the
loop when ``predict`` is a coroutine, else in the model's worker threads in one
hop, unless the model has proven to answer in microseconds (ModelGate's inline).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mlserve.batching import batching_runner, max_batch_size
from mlserve.core import tracing
from mlserve.core.aio import drive, run_in_threadpool
from mlserve.core.clock import when_ns
from mlserve.core.context import GraphContext
from mlserve.core.deadlines import with_timeout
from mlserve.core.events import HTTP_TRIGGERS, Event, Response
from mlserve.core.explain_limits import check_explain_rows, explain_gate_of, explain_limits
from mlserve.core.gate import gate_of
from mlserve.core.limits import (
    DEFAULTS,
    ServerLimits,
    limits_of,
    request_timeout,
    stream_limits,
)
from mlserve.core.loads import reporting_progress
from mlserve.core.recorder import ModelRecorder, model_recorder
from mlserve.core.stats import ModelStats
from mlserve.core.streams import ChunkStream
from mlserve.protocol.errors import (
    IllegalOperation,
    InvalidInput,
    MLServeError,
    ModelError,
    ModelNotReady,
)
from mlserve.protocol.forms import (
    InferenceRequest,
    build_outputs,
    check_declared_inputs,
    check_declared_rows,
    decode_request,
    parse_json_body,
    wants_binary,
)
from mlserve.protocol.paths import get_path, set_path
from mlserve.protocol.tensors import decode_tensor, encode_tensor

__all__ = ["V2ModelServer", "face_metadata"]

logger = logging.getLogger("mlserve.model")

# How long an event from a stream trigger waits for a model still loading.
DEFAULT_LOAD_WAIT_SECONDS = 300.0


# What a hook usually returns: no need to ask whether it must be awaited
# (inspect.isawaitable costs an abstract-class check, ~1 us).
_PLAIN = frozenset({list, dict, tuple, str, int, float, bool, type(None), np.ndarray})


class Runner(Protocol):
    """How the dispatch calls a model's hooks: ``user`` (predict, an op) and ``block``
    (a blocking wait): directly, on the loop, or through the batcher."""

    counts_executions: bool

    async def user(self, fn: Callable[..., Any], *args: object) -> Any: ...

    async def block(self, fn: Callable[..., Any], *args: object) -> Any: ...


class _SyncRunner:
    """Runs hooks directly: the dispatch driven by ``do_event``."""

    counts_executions = False  # the batcher's runner counts its merged calls itself

    @staticmethod
    async def user(fn: Callable[..., Any], *args: object) -> Any:
        result = fn(*args)
        if type(result) not in _PLAIN and inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return result

    block = user


class _AsyncRunner:
    """Awaits coroutine hooks on the loop; blocking waits go to the pool."""

    counts_executions = False

    @staticmethod
    async def user(fn: Callable[..., Any], *args: object) -> Any:
        result = fn(*args)
        if inspect.isawaitable(result):
            result = await result
        return result

    @staticmethod
    async def block(fn: Callable[..., Any], *args: object) -> Any:
        return await run_in_threadpool(fn, *args)


class _ThreadRunner(_AsyncRunner):
    """A streaming model's hooks: sync ones in the worker pool, coroutines on the loop.
    Its gate holds a slot per open stream, not a thread (ModelGate.enter)."""

    @staticmethod
    async def user(fn: Callable[..., Any], *args: object) -> Any:
        if _is_coroutine_function(fn):
            return await fn(*args)
        result = await run_in_threadpool(fn, *args)
        if inspect.isawaitable(result):
            result = await result
        return result


# The span of the model's hook: predict's, or explain's (``_HOOK_SPANS[op == "explain"]``).
_HOOK_SPANS = ("predict", "explain")

# The operations a streaming model answers from its generator: ``infer_stream`` chunk by
# chunk, the others with the chunks gathered (docs/models.md#streaming-models).
_STREAM_OPS = frozenset({"infer", "predict", "infer_stream"})


def _is_coroutine_function(fn: object) -> bool:
    """``inspect.iscoroutinefunction`` for the common case (a plain method) in one
    attribute read; anything else (a partial, a callable object) asks inspect."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    if code is not None:
        return bool(code.co_flags & inspect.CO_COROUTINE)
    return inspect.iscoroutinefunction(fn)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _run_to_end(awaitable: Any) -> Any:
    """Await ``awaitable`` from sync code: on a loop of its own, in another thread
    when this one runs a loop already (a notebook's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(awaitable))
    with ThreadPoolExecutor(1, thread_name_prefix="mlserve-load") as pool:
        return pool.submit(asyncio.run, _awaited(awaitable)).result()


def _json_object(body: object) -> dict[str, Any]:
    """An inference body that is not a dict yet: text or bytes that no JSON content type
    announced (``curl -d`` sends a form type) are parsed here, so that bad JSON gets the
    parser's message whatever the content type (docs/serving.md#the-url-surface)."""
    if isinstance(body, (str, bytes, bytearray, memoryview)) and body:
        body = parse_json_body(body, "application/json")
    if not isinstance(body, dict):
        got = "an empty body" if body is None else type(body).__name__
        raise InvalidInput(f"the request body must be a JSON object, got {got}")
    return body


def _body_op(body: object) -> object:
    """The ``operation`` a dict body names (mlrun's way to ask for one without a path)."""
    return body.get("operation") if type(body) is dict else None


def split_name(name: str | None) -> tuple[str, str]:
    """``"m:v"`` -> ``("m", "v")``; without a colon the version is ``""``."""
    if name and ":" in name:
        model, version = name.split(":", 1)
        return model, version
    return name or "", ""


# The network faces whose model metadata carries the OIP's required keys
# (docs/protocol.md#model-metadata); the mock server answers as mlrun's does.
_V2_FACES = frozenset({"http", "grpc"})


def face_metadata(metadata: Any, event: Event) -> Any:
    """``metadata`` as ``event``'s face answers it: a network face's has the OIP's
    ``platform`` (empty when the class names none); mlrun's mock server's has not."""
    if event.trigger.kind in _V2_FACES and isinstance(metadata, dict):
        if "platform" not in metadata:
            return {**metadata, "platform": ""}
    return metadata


class V2ModelServer:
    """Base class of a served model.

    Subclass it, write ``load()`` (set ``self.model``) and ``predict(request)``
    (return the outputs), and add it to a function::

        class MyModel(V2ModelServer):
            def load(self):
                self.model = joblib.load(self.get_model(".pkl")[0])

            def predict(self, request):
                return self.model.predict(request["inputs"]).tolist()

        fn.add_model("m1", model_path="model/", class_name=MyModel)

    Keyword arguments beyond the named ones are the model's parameters
    (``get_param``). ``inputs`` / ``outputs``, when given (or set in
    ``load()``), declare the tensors as ``[{"name", "datatype", "shape"}]``
    (shape with -1 for any size): requests are checked against them and
    model metadata reports them.
    """

    platform = ""
    """Shown as ``platform`` in model metadata (e.g. ``tensorflow_savedmodel``)."""

    def __init__(
        self,
        context: GraphContext | None = None,
        name: str | None = None,
        model_path: str | None = None,
        model: Any = None,
        protocol: str | None = None,
        input_path: str | None = None,
        result_path: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.name, self.version = split_name(name)
        self.context = context or GraphContext()
        self.model_path = model_path
        self.protocol = protocol or "v2"
        self.inputs: list[dict[str, Any]] = list(kwargs.pop("inputs", None) or [])
        self.outputs: list[dict[str, Any]] = list(kwargs.pop("outputs", None) or [])
        self.versions: list[str] = [self.version] if self.version else []
        self.model_spec: Any = None
        self.metrics: dict[str, Any] = {}
        self.labels: dict[str, Any] = dict(kwargs.pop("labels", None) or {})
        self.model_logger: Any = None
        self.model_endpoint_uid: str | None = None
        # what the default explain() answers with: shap_explainer(...) set in load()
        # (mlserve.frameworks.explainers; docs/models.md#explaining-a-model)
        self.explainer: Any = None
        self.stats = ModelStats()
        self._recorded: ModelRecorder | None = None  # where this version's Prometheus counts go
        self.error = ""
        self.ready = False
        self._input_path = input_path
        self._result_path = result_path
        self._kwargs = kwargs
        self._loaded = threading.Event()
        self._streams = False  # predict yields its answer in pieces: decided at load
        self._streams_async = False  # ... on the loop (an async generator or coroutine)
        self.model = model
        if model is not None:
            self._decide_streaming()
            self._mark_ready()

    # ---- lifecycle ---------------------------------------------------------

    def load(self) -> Awaitable[None] | None:
        """Load the model into ``self.model``; runs once at start, beside the other
        models' loads. It may be ``async def`` (awaited on a loop of its own); an
        exception leaves the model not ready, with its message as the reason."""

    def post_init(self, mode: str = "sync") -> None:
        """Load the model: now (``"sync"``) or in a background thread (``"async"``)."""
        if self.ready:
            return
        if mode == "async":
            threading.Thread(
                target=self._load_and_update_state, daemon=True, name=f"load-{self.name}"
            ).start()
        else:
            self._load_and_update_state()

    def _load_and_update_state(self) -> None:
        """Run ``load()`` (awaited when it is a coroutine), saying when it starts, how
        long it has run every so often, and how it ended
        (docs/serving.md#start-up-loading-the-models)."""
        what = f"model {self.name}" + (f" version {self.version}" if self.version else "")
        logger.info("loading %s", what)
        started = time.perf_counter()
        try:
            with reporting_progress(lambda s: logger.info("still loading %s (%.0f s)", what, s)):
                loading = self.load()
                if inspect.isawaitable(loading):
                    _run_to_end(loading)
                self._decide_streaming()
        except Exception as exc:  # a failing model stays not ready; the others serve
            self.error = f"{type(exc).__name__}: {exc}"
            # an ImportError's message says what is missing (and which extra installs it)
            trace = not isinstance(exc, ImportError)
            seconds = time.perf_counter() - started
            logger.error(
                "failed to load %s after %.2f s: %s", what, seconds, self.error, exc_info=trace
            )
            self._loaded.set()
            return
        self.load_seconds = time.perf_counter() - started
        model_recorder(self.name, self.version).loaded(self.load_seconds)
        self._mark_ready()
        logger.info("%s ready in %.2f s", what, self.load_seconds)

    def _decide_streaming(self) -> None:
        """Whether this model streams, asked once, when it is loaded: its ordinary calls
        never ask again. A streaming model is never batched."""
        streams = bool(self.is_streaming())
        if streams and max_batch_size(self) > 0:
            raise ValueError(
                f"model {self.name} streams (its predict yields chunks) and cannot be batched: "
                "drop its max_batch_size (docs/models.md#streaming-models)"
            )
        self._streams = streams
        predict = self.predict
        self._streams_async = inspect.isasyncgenfunction(predict) or _is_coroutine_function(predict)

    def _mark_ready(self) -> None:
        self.error = ""
        self.ready = True
        self._loaded.set()

    # ---- parameters, metrics, files ---------------------------------------

    def get_param(self, key: str, default: object = None) -> Any:
        """A model parameter (constructor keyword), else the function's parameter."""
        if key in self._kwargs:
            return self._kwargs[key]
        return self.context.get_param(key, default)

    def set_metric(self, name: str, value: object) -> None:
        """Attach a metric to the next model-log record."""
        self.metrics[name] = value

    def get_model(self, suffix: str = "") -> tuple[str, dict[str, str]]:
        """Resolve ``model_path`` to ``(model_file, extra_data)``.

        A file is the model file; in a folder, the first file (by name) ending
        in ``suffix`` is, and the folder's other files are ``extra_data``
        (``{file name: path}``).
        """
        if not self.model_path:
            raise ValueError(f"model {self.name} has no model_path")
        path = Path(os.path.expanduser(self.model_path))
        if path.is_file():
            return str(path), {}
        if not path.is_dir():
            raise FileNotFoundError(f"model_path {self.model_path} does not exist")
        files = sorted(p for p in path.iterdir() if p.is_file())
        matches = [p for p in files if p.name.endswith(suffix)]
        if not matches:
            raise FileNotFoundError(f"no file ending in '{suffix}' in {self.model_path}")
        model_file = matches[0]
        extra = {p.name: str(p) for p in files if p != model_file}
        return str(model_file), extra

    # ---- user hooks ----------------------------------------------------------

    def preprocess(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        """Change the request before validation and predict."""
        return request

    def validate(self, request: dict[str, Any], operation: str) -> dict[str, Any]:
        """Check the request; raise to reject it with a 400."""
        if self.protocol == "v2":
            if not isinstance(request, dict) or "inputs" not in request:
                raise InvalidInput('Expected key "inputs" in request body')
            if isinstance(request, InferenceRequest):
                if self.inputs:
                    check_declared_inputs(
                        request.tensors, self.inputs, exact_names=True, model=self.name
                    )
            elif not isinstance(request["inputs"], list):
                raise InvalidInput('Expected "inputs" to be a list')
            elif self.inputs:
                if not request["inputs"]:  # neither rows nor tensors (docs/protocol.md#errors)
                    check_declared_inputs({}, self.inputs, model=self.name)
                check_declared_rows(request["inputs"], self.inputs)
        return request

    def predict(self, request: dict[str, Any]) -> Any:
        """Return the outputs for ``request["inputs"]``."""
        raise NotImplementedError(f"model {self.name} has no predict()")

    def is_streaming(self) -> bool:
        """Whether ``predict`` answers in pieces (docs/models.md#streaming-models): it is
        a generator or an async generator function. Override it to return True when
        ``predict`` returns a generator that it makes some other way."""
        predict = self.predict
        return inspect.isgeneratorfunction(predict) or inspect.isasyncgenfunction(predict)

    def explain(self, request: dict[str, Any]) -> Any:
        """Return an explanation for ``request["inputs"]``: by default the SHAP values of
        ``self.explainer`` (docs/models.md#explaining-a-model)."""
        if self.explainer is None:
            raise NotImplementedError(f"model {self.name} has no explain()")
        return self.explainer.answer(request, self._feature_names())

    def _feature_names(self) -> list[str] | None:
        """The model's feature names: its declared inputs when there is one per feature,
        else its endpoint's (``model_spec.feature_names``)."""
        if len(self.inputs) > 1:
            return [str(tensor["name"]) for tensor in self.inputs]
        names = getattr(self.model_spec, "feature_names", None)
        return [str(name) for name in names] if names else None

    def postprocess(self, response: dict[str, Any]) -> dict[str, Any]:
        """Change the response envelope before it is returned and logged."""
        return response

    def logged_results(
        self, request: dict[str, Any], response: dict[str, Any], op: str
    ) -> tuple[Any, Any]:
        """Return ``(inputs, outputs)`` to log instead of the real ones;
        ``(None, None)`` logs the real ones."""
        return None, None

    def to_class_args(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this model (for export)."""
        args: dict[str, Any] = {"model_path": self.model_path, "protocol": self.protocol}
        args.update(self._kwargs)
        for key, value in (
            ("inputs", self.inputs),
            ("outputs", self.outputs),
            ("labels", self.labels),
            ("input_path", self._input_path),
            ("result_path", self._result_path),
        ):
            if value:
                args[key] = value
        return {key: value for key, value in args.items() if value is not None}

    def to_dict(self) -> dict[str, Any]:
        """The model as a graph step (``class_name``, ``name``, ``class_args``), as mlrun has it."""
        cls = type(self)
        module = cls.__module__
        class_name = (
            cls.__qualname__
            if module in ("__main__", "builtins")
            else f"{module}.{cls.__qualname__}"
        )
        args = self.to_class_args()
        struct: dict[str, Any] = {
            "class_name": class_name,
            "name": f"{self.name}:{self.version}" if self.version else (self.name or cls.__name__),
        }
        for key in ("input_path", "result_path"):
            value = args.pop(key, None)
            if value is not None:
                struct[key] = value
        struct["class_args"] = args
        return struct

    # ---- metadata ------------------------------------------------------------

    def get_metadata(self) -> dict[str, Any]:
        """Model metadata (docs/serving.md#the-url-surface): mlrun's keys, and the V2
        protocol's optional ``platform`` (when the class names one) and ``versions`` (when
        they are numbers, as Triton's and TF Serving's clients read them)."""
        metadata: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
        }
        if self.platform:
            metadata["platform"] = self.platform
        if self.versions and all(version.isdigit() for version in self.versions):
            metadata["versions"] = list(self.versions)
        return metadata

    # ---- dispatch --------------------------------------------------------------

    def do_event(self, event: Event, *args: object, **kwargs: object) -> Event:
        """Handle one event synchronously (mlrun's entry point)."""
        if self._streams:
            return drive(self._stream_dispatch(event, _SyncRunner, limits_of(self.context)))
        return drive(self._dispatch(event, _SyncRunner))

    async def do_event_async(self, event: Event) -> Event:
        """Handle one event from the loop: sync models run in the pool in one hop,
        batched models (mlserve.batching) dispatch on the loop and predict in the pool."""
        if event.path == "explain" or (not event.path and _body_op(event.body) == "explain"):
            return await self._explain_async(event)
        gate = getattr(self, "_gate", None)
        if gate is not None and gate.inline and self.ready:  # a sync model proven cheap (ModelGate)
            return gate.run_inline(self.do_event, event)
        if (
            self._streams
        ):  # never inline: its gate never times a call (docs/models.md#streaming-models)
            limits = limits_of(self.context)
            return await with_timeout(
                self._stream_dispatch(event, _ThreadRunner, limits), request_timeout(limits, event)
            )
        # Its own threads (or slots) and bounded queue: a slow model never starves another,
        # and a request's deadline holds on every route to a model, V2 or TF Serving
        # (docs/security.md#limits).
        limits = limits_of(self.context)
        if _is_coroutine_function(self.predict):
            call = gate_of(self, limits).run_async(self._dispatch(event, _AsyncRunner))
        else:
            batched = batching_runner(self)
            if batched is not None:
                return await self._dispatch(event, batched)
            call = gate_of(self, limits).run(self.do_event, event)
        return await with_timeout(call, request_timeout(limits, event))

    async def _explain_async(self, event: Event) -> Event:
        """An explain call, on the model's explain budget and under its explain timeout,
        apart from inference (docs/explain.md#limits)."""
        limits = explain_limits(self)
        gate = explain_gate_of(self, limits)
        if _is_coroutine_function(self.explain):
            call = gate.run_async(self._dispatch(event, _AsyncRunner))
        else:
            call = gate.run(self.do_event, event)
        timeout = limits.timeout if event.trigger.kind in HTTP_TRIGGERS else 0.0
        return await with_timeout(call, timeout)

    def _asked(self, event: Event, unnamed: str) -> tuple[Any, str, object]:
        """``(body, operation, request id)`` of an event: the operation its path or body
        names, else ``unnamed`` for a call that posts a body."""
        body = get_path(event.body, self._input_path) if self._input_path else event.body
        op = (event.path or "").strip("/")
        event_id = event.id
        if isinstance(body, dict):
            op = op or str(body.get("operation") or "")
            event_id = body.get("id", event_id)
        if not op and event.method != "GET":
            op = unnamed
        return body, op, event_id

    async def _dispatch(self, event: Event, runner: Runner) -> Event:
        body, op, event_id = self._asked(event, "infer")
        if op in ("infer", "predict", "explain"):
            response: Any = await self._infer(event, body, op, event_id, runner)
        elif event.method == "GET" and op == "":
            response = face_metadata(self.get_metadata(), event)
        elif event.method == "GET" and op == "ready":
            event.terminated = True
            status = 200 if self.ready else 503
            event.body = Response({"name": self.name, "ready": self.ready}, status_code=status)
            return event
        elif op == "infer_stream":  # a model that does not stream: one chunk, its answer
            answer = await self._infer(event, body, op, event_id, runner)
            response = ChunkStream(_one_chunk(answer), name=self.name)
        elif hasattr(self, f"op_{op}"):
            response = await runner.user(getattr(self, f"op_{op}"), event)
        else:
            raise IllegalOperation(f"illegal model operation '{op}', method={event.method}")
        if self._result_path:
            response = set_path(event.body, self._result_path, response)
        event.body = response
        return event

    async def _wait_ready(self, event: Event, runner: Runner) -> None:
        if self.ready:
            return
        if self._loaded.is_set() or event.trigger.kind in HTTP_TRIGGERS:
            reason = f": {self.error}" if self.error else " yet"
            raise ModelNotReady(f"model {self.name} is not ready{reason}")
        timeout = float(self.context.get_param("load_wait_timeout", DEFAULT_LOAD_WAIT_SECONDS))
        logger.info("event %s waits for model %s to load", event.id, self.name)
        await runner.block(self._loaded.wait, timeout)
        if not self.ready:
            raise ModelNotReady(
                f"model {self.name} did not become ready: {self.error or 'timeout'}"
            )

    async def _infer(
        self, event: Event, body: object, op: str, event_id: object, runner: Runner
    ) -> Any:
        if not self.ready:
            await self._wait_ready(event, runner)
        start_ns = time.time_ns()  # the call's wall-clock start: records and timestamps take it
        if not isinstance(body, dict):
            body = _json_object(body)
        request: Any = body
        started_ns = time.perf_counter_ns()
        try:
            request = decode_request(body)
            if op == "explain":
                check_explain_rows(request, explain_limits(self).max_rows)
            traced = tracing.on and tracing.recording()  # a span per hook, when sampled
            if traced:  # (docs/observability.md#tracing)
                with tracing.span("preprocess", {"mlserve.model": self.name}):
                    request = self._validated(self.preprocess(request, op), op)
            else:
                request = self._validated(self.preprocess(request, op), op)
            hook = self.explain if op == "explain" else self.predict
            hook_ns = time.perf_counter_ns()
            if traced:
                with tracing.span(_HOOK_SPANS[op == "explain"], {"mlserve.model": self.name}):
                    outputs = await runner.user(hook, request)
            else:
                outputs = await runner.user(hook, request)
            compute_ns = time.perf_counter_ns() - hook_ns
            if traced:
                with tracing.span("postprocess", {"mlserve.model": self.name}):
                    envelope = self._envelope(request, outputs, event_id, start_ns, op)
                    response = self.postprocess(envelope)
            else:
                response = self.postprocess(
                    self._envelope(request, outputs, event_id, start_ns, op)
                )
        except Exception as exc:
            elapsed_ns = time.perf_counter_ns() - started_ns
            self.stats.record_inference(False, elapsed_ns)
            self._recorder().error(op)
            if self.model_logger is not None:
                if isinstance(request, dict) and "id" not in request:
                    request = {**request, "id": event_id}  # the record names the request (mlrun)
                self.model_logger.push_error(self, start_ns, request, op, exc)
            raise
        elapsed_ns = time.perf_counter_ns() - started_ns
        if runner.counts_executions:  # the batcher recorded the merged call
            self.stats.record_inference(True, elapsed_ns)
        else:
            self.stats.record_call(start_ns, elapsed_ns, compute_ns)
        self._recorder().ok(op, elapsed_ns)
        if self.model_logger is not None:
            self._log(start_ns, elapsed_ns // 1000, request, response, op)
        return response

    def _recorder(self) -> ModelRecorder:
        """This version's metrics recorder (looked up again if the name or version changed)."""
        recorder = self._recorded
        if recorder is None or recorder.name != self.name or recorder.version != self.version:
            recorder = self._recorded = model_recorder(self.name, self.version)
        return recorder

    def _validated(self, request: Any, op: str) -> Any:
        """``validate``, where any exception is a rejected request: a 400."""
        try:
            return self.validate(request, op)
        except MLServeError:
            raise
        except Exception as exc:
            raise InvalidInput(f"{type(exc).__name__}: {exc}") from exc

    def _envelope(
        self, request: object, outputs: object, event_id: object, start_ns: int, op: str
    ) -> dict[str, Any]:
        response: dict[str, Any] = {"id": event_id, "model_name": self.name}
        if self.version:
            response["model_version"] = self.version
        if isinstance(request, InferenceRequest):
            default_name = self.outputs[0]["name"] if self.outputs else "output-0"
            response["outputs"] = build_outputs(outputs, request, default_name)
            parameters = getattr(outputs, "parameters", None)  # an explanation's names
            if op == "explain" and isinstance(parameters, dict):
                response["parameters"] = parameters
        else:
            response["outputs"] = outputs
            if op != "explain":
                response["timestamp"] = when_ns(start_ns)  # its second's text cached
        return response

    def _log(self, start_ns: int, microsec: int, request: Any, response: Any, op: str) -> None:
        inputs, outputs = self.logged_results(request, response, op)
        if inputs is not None or outputs is not None:
            request = {"id": request.get("id"), "inputs": inputs or []}
            response = {"outputs": outputs or []}
        metrics = self.metrics or None  # no new dict per call when no metric was set
        if metrics is not None:
            self.metrics = {}
        self.model_logger.push(self, start_ns, request, response, op, microsec, metrics)

    # ---- streaming -------------------------------------------------------------

    async def _stream_dispatch(
        self, event: Event, runner: Runner, limits: ServerLimits = DEFAULTS
    ) -> Event:
        """A streaming model's event: ``infer_stream`` answers a ChunkStream of answers
        (its first chunk already come, so an early failure is an ordinary error), ``infer``
        and ``predict`` one answer of the chunks gathered; other operations as any model's.
        An event that names no operation (a Kafka message, a body-routed POST) streams."""
        body, op, event_id = self._asked(event, "infer_stream")  # unnamed: it streams
        if op not in _STREAM_OPS:
            return await self._dispatch(event, runner)
        if not self.ready:
            await self._wait_ready(event, runner)
        if not isinstance(body, dict):
            body = _json_object(body)
        keep = op != "infer_stream" or self.model_logger is not None
        streamed = _Streamed(self, body, op, event_id, keep)
        gate = gate_of(self, limits) if runner is _ThreadRunner else None
        if gate is not None:
            await gate.enter()  # 429 when its streams and queue are all taken
        try:
            if gate is not None and not self._streams_async:
                chunks: Any = streamed.begun(body)  # in the generator's thread, at its first pull
            else:  # an async model's on the loop (as its infer), a sync caller's in its thread
                request, source = self._begin_stream(body, op)
                if inspect.isawaitable(source):  # an async predict that returns a generator
                    source = _run_to_end(source) if runner is _SyncRunner else await source
                streamed.request = request
                chunks = streamed.chunks(source)
        except BaseException as exc:  # a deadline's cancel too: the slot is freed
            if gate is not None:
                gate.leave()
            streamed.end(exc)
            raise
        if gate is None and op != "infer_stream":  # a sync caller: gathered in its thread
            try:
                if isinstance(chunks, Iterator):
                    for _ in chunks:
                        pass
                else:
                    _run_to_end(_drained(chunks))
            except Exception as exc:
                streamed.end(exc)
                raise
            streamed.end(None)
            response: Any = streamed.gathered()
        else:
            chunk_timeout, timeout = stream_limits(limits, event)
            stream = ChunkStream(
                chunks,
                queue=limits.stream_queue,
                chunk_timeout=chunk_timeout,
                timeout=timeout,
                on_end=streamed.ended if gate is None else _leaving(gate, streamed),
                name=self.name,
            )
            if gate is not None:
                await stream.prefetch()  # its error (or none) ends the stream: recorded
            if op == "infer_stream":
                response = stream
            else:
                async for _ in stream:
                    pass
                response = streamed.gathered()
        if self._result_path:
            response = set_path(event.body, self._result_path, response)
        event.body = response
        return event

    def _begin_stream(self, body: dict[str, Any], op: str) -> tuple[Any, Any]:
        """``(request, what predict returned)``: the request decoded, preprocessed and
        validated as ``infer`` does it, and the model's generator made."""
        request = decode_request(body)
        request = self._validated(self.preprocess(request, op), op)
        return request, self.predict(request)


def _leaving(gate: Any, streamed: _Streamed) -> Callable[[ChunkStream, BaseException | None], None]:
    """The end of a stream that held a slot of ``gate``: the slot freed, the call recorded."""

    def ended(stream: ChunkStream, error: BaseException | None) -> None:
        gate.leave()
        streamed.end(error)

    return ended


def _as_iterator(source: object) -> Iterator[Any]:
    """What a streaming predict returned, as chunks: a value that is no iterator (an
    ``is_streaming`` override's plain answer) is one chunk."""
    if isinstance(source, Iterator) and not isinstance(source, (str, bytes)):
        return source
    return iter((source,))


async def _one_chunk(answer: object) -> AsyncIterator[Any]:
    yield answer


async def _drained(chunks: AsyncIterator[Any]) -> None:
    async for _ in chunks:
        pass


class _Streamed:
    """One streamed call's chunks on their way out: each one enveloped and postprocessed
    as one answer, counted and timed, and kept when they are to be gathered (an ``infer``
    answer, the model-log); and the call recorded once, when it ends."""

    def __init__(
        self, model: V2ModelServer, request: Any, op: str, event_id: object, keep: bool
    ) -> None:
        self.model = model
        self.request = request
        self.op = op
        self.event_id = event_id
        self.start_ns = time.time_ns()
        self.started = time.perf_counter_ns()
        self.first_ns = 0  # perf_counter_ns when the first chunk was made (0: none yet)
        self.count = 0
        self.kept: list[dict[str, Any]] | None = [] if keep else None
        self.ended_already = False

    def wrap(self, outputs: object) -> dict[str, Any]:
        model = self.model
        chunk = model.postprocess(
            model._envelope(self.request, outputs, self.event_id, self.start_ns, "infer")
        )
        if not self.count:
            self.first_ns = time.perf_counter_ns()
        self.count += 1
        if self.kept is not None:
            self.kept.append(chunk)
        return chunk

    def begun(self, body: dict[str, Any]) -> Iterator[Any]:
        """A sync model's chunks, the request decoded, preprocessed and validated and
        its generator made where they are pulled (the stream's own thread): one thread
        hop per stream, and a failure there is the stream's first pull's."""
        request, source = self.model._begin_stream(body, self.op)
        self.request = request
        if hasattr(source, "__anext__"):
            raise ModelError(
                f"model {self.model.name}: a plain predict returned an async generator, "
                "make predict async (docs/models.md#streaming-models)"
            )
        yield from self._sync_chunks(_as_iterator(source))

    def chunks(self, source: object) -> Iterator[Any] | AsyncIterator[Any]:
        """The model's chunks enveloped; closing these closes the model's generator. A
        predict that returned no generator (an ``is_streaming`` override's) is one chunk."""
        if hasattr(source, "__anext__"):
            return self._async_chunks(source)  # type: ignore[arg-type]
        return self._sync_chunks(_as_iterator(source))

    def _sync_chunks(self, source: Iterator[Any]) -> Iterator[Any]:
        try:
            for outputs in source:
                yield self.wrap(outputs)
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    async def _async_chunks(self, source: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for outputs in source:
                yield self.wrap(outputs)
        finally:
            close = getattr(source, "aclose", None)
            if close is not None:
                await close()

    def gathered(self) -> dict[str, Any]:
        """One answer of the chunks (``infer`` on a streaming model): rows, the list of
        the chunks' outputs; tensors, each output's data joined along its first axis."""
        model, chunks = self.model, self.kept or []
        response: dict[str, Any] = {"id": self.event_id, "model_name": model.name}
        if model.version:
            response["model_version"] = model.version
        if chunks:
            response = {key: value for key, value in chunks[0].items() if key != "outputs"}
        if isinstance(self.request, InferenceRequest):
            response["outputs"] = _joined_tensors(
                [c.get("outputs") or [] for c in chunks], self.request
            )
        else:
            response["outputs"] = [chunk.get("outputs") for chunk in chunks]
        return response

    def ended(self, stream: ChunkStream, error: BaseException | None) -> None:
        self.end(error)

    def end(self, error: BaseException | None) -> None:
        """Record the call once: statistics, metrics and one model-log record with the
        chunks gathered (docs/monitoring.md#streamed-calls)."""
        if self.ended_already:
            return
        self.ended_already = True
        model = self.model
        elapsed_ns = time.perf_counter_ns() - self.started
        cancelled = isinstance(error, asyncio.CancelledError)
        recorder = model._recorder()
        if error is None or cancelled:
            model.stats.record_call(self.start_ns, elapsed_ns, elapsed_ns)
            recorder.ok(self.op, elapsed_ns)
        else:
            model.stats.record_inference(False, elapsed_ns)
            recorder.error(self.op)
        first_ns = self.first_ns - self.started if self.first_ns else None
        recorder.streamed(first_ns, self.count)
        logger_ = model.model_logger
        if logger_ is None:
            return
        request = self.request
        if isinstance(request, dict) and "id" not in request:
            request = {**request, "id": self.event_id}  # the record names the request (mlrun)
        stream: dict[str, Any] = {
            "chunks": self.count,
            "first_chunk_microsec": None if first_ns is None else first_ns // 1000,
        }
        if cancelled:
            stream["cancelled"] = True
        elif error is not None:
            stream["error"] = str(error)
        push_stream = getattr(logger_, "push_stream", None)
        if push_stream is not None:
            microsec = elapsed_ns // 1000
            push_stream(model, self.start_ns, request, self.gathered(), self.op, microsec, stream)
        elif error is None or cancelled:  # a logger of its own: the call as infer logs one
            microsec = elapsed_ns // 1000
            logger_.push(model, self.start_ns, request, self.gathered(), self.op, microsec, None)
        else:
            logger_.push_error(model, self.start_ns, request, self.op, error)


def _joined_tensors(outputs: list[list[dict[str, Any]]], request: InferenceRequest) -> list[Any]:
    """Each output tensor of the chunks, joined along axis 0, in the order they came."""
    parts: dict[str, list[Any]] = {}
    datatypes: dict[str, str] = {}
    for chunk in outputs:
        for obj in chunk:
            name = str(obj["name"])
            parts.setdefault(name, []).append(np.atleast_1d(decode_tensor(obj)))
            datatypes.setdefault(name, str(obj.get("datatype") or ""))
    return [
        encode_tensor(
            name,
            np.concatenate(arrays, axis=0),
            datatypes[name] or None,
            binary=wants_binary(request, name),
        )
        for name, arrays in parts.items()
    ]
