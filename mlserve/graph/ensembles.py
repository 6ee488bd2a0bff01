"""Routers that run every route: ``ParallelRun`` merges their results,
``VotingEnsemble`` votes on their predictions (docs/graphs.md#ensembles-and-parallel-runs).

    fn.set_topology("router", class_name=VotingEnsemble(weights={"m1": 2, "m2": 1}))
    fn.add_model("m1", class_name=M1)
    fn.add_model("m2", class_name=M2)

Routes run concurrently in a thread pool (``executor_type="thread"``, the
default), in worker processes (``"process"``), or one after the other in the
caller's thread (``"array"``), as mlrun's ``ParallelRunnerModes``. A process
worker rebuilds each route from its description (``to_dict()``) with the class
of the route's live object (or its handler function) sent by reference, so it
must be defined at a module's top level (a script's, a test module's, a
package's; not inside a function) and its arguments picklable.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np

from mlserve.core import tracing
from mlserve.core.context import GraphContext
from mlserve.core.events import Event, Response
from mlserve.core.streams import ChunkStream
from mlserve.graph.routers import VERSIONED_PATH, BaseModelRouter, RouteRun, run_sync
from mlserve.model import face_metadata
from mlserve.protocol.errors import InvalidInput, ModelNotFound, unknown_model
from mlserve.protocol.forms import build_outputs, decode_request, is_tensor_inputs
from mlserve.protocol.tensors import decode_tensor

__all__ = ["EXECUTOR_TYPES", "VOTE_TYPES", "ParallelRun", "ParallelRunnerModes", "VotingEnsemble"]


class ParallelRunnerModes(StrEnum):
    """How an ensemble runs its routes (mlrun's names and values)."""

    array = "array"  # one after the other, in the caller's thread
    process = "process"  # in worker processes
    thread = "thread"  # in a thread pool

    @staticmethod
    def all() -> list[ParallelRunnerModes]:
        return [ParallelRunnerModes.thread, ParallelRunnerModes.process, ParallelRunnerModes.array]


EXECUTOR_TYPES = tuple(mode.value for mode in ParallelRunnerModes)
VOTE_TYPES = ("classification", "regression")
OPERATIONS = ("infer", "predict", "explain")


def _event_copy(event: Event) -> Event:
    """A copy of the event for one route: its own body dict (values shared, as
    raw tensor buffers cannot be deep-copied)."""
    clone = copy.copy(event)
    if isinstance(event.body, dict):
        clone.body = dict(event.body)
    return clone


_process_routes: dict[str, Any] = {}


def _run_in_process(
    key: str,
    struct: dict[str, Any],
    parameters: dict[str, Any],
    body: object,
    path: str,
    method: str,
) -> Any:
    """Run one route in a worker process, built once per process from its description."""
    from mlserve.graph.steps import step_from_dict

    cache_key = f"{key}:{sorted(struct.items())!r}:{sorted(parameters.items())!r}"
    step = _process_routes.get(cache_key)
    if step is None:
        step = step_from_dict(struct, name=key)
        step.init_object(GraphContext(parameters), {}, "sync")
        _process_routes[cache_key] = step
    return step.run(Event(body=body, path=path, method=method)).body


def _process_description(route: Any, namespace: dict[str, Any]) -> dict[str, Any]:
    """A route's description for a worker process: its class (the class of its
    live object) or its handler function as objects, pickled by module and name,
    not names that only resolve in the parent's namespace."""
    struct = route.to_dict()
    live = getattr(route, "object", None)
    handler = struct.get("handler")
    if live is not None and struct.get("class_name"):
        struct["class_name"] = type(live)
    elif isinstance(handler, str) and handler in namespace and callable(namespace[handler]):
        struct["handler"] = namespace[handler]
    return struct


def executor_mode(executor_type: Any) -> ParallelRunnerModes:
    """``executor_type`` (a mode, its value, or any str enum of the same values) as a mode."""
    value = getattr(executor_type, "value", executor_type) or ParallelRunnerModes.thread.value
    try:
        return ParallelRunnerModes(value)
    except ValueError:
        raise ValueError(
            f"executor_type must be one of {EXECUTOR_TYPES}, got '{executor_type}'"
        ) from None


def _traced_route(key: str, call: Callable[[], Any]) -> Any:
    """``call()`` inside a ``route {key}`` span (docs/observability.md#tracing)."""
    with tracing.span(f"route {key}", {"mlserve.step": key}):
        return call()


class ParallelRun(BaseModelRouter):
    """Runs every route on the event and merges their dict results (starting
    from a copy of the request body with ``extend_event=True``); a result that
    is not a dict is kept under its route's name."""

    def __init__(
        self,
        context: GraphContext | None = None,
        name: str | None = None,
        routes: dict[str, Any] | None = None,
        extend_event: bool = False,
        executor_type: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(context, name, routes, **kwargs)
        self.extend_event = extend_event
        self.executor_type = executor_mode(executor_type).value
        self._executor: Executor | None = None

    def to_class_args(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this router (for export)."""
        args = {
            "name": self.name,
            "extend_event": self.extend_event or None,
            "executor_type": None if self.executor_type == "thread" else self.executor_type,
        }
        return {key: value for key, value in args.items() if value is not None}

    def executor(self) -> Executor:
        if self._executor is None:
            workers = max(1, len(self.routes))
            if self.executor_type == "process":
                from concurrent.futures import ProcessPoolExecutor  # loads multiprocessing

                self._executor = ProcessPoolExecutor(max_workers=workers)
            else:
                self._executor = ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix="mlserve-route"
                )
        return self._executor

    def _submit(self, key: str, route: Any, event: Event) -> Future[Any]:
        clone = _event_copy(event)
        if self.executor_type == "process":
            return self.executor().submit(
                _run_in_process,
                key,
                _process_description(route, getattr(self.context.server, "namespace", None) or {}),
                dict(self.context.parameters),
                clone.body,
                clone.path,
                clone.method,
            )
        if tracing.on and tracing.recording():  # a span per route, on its pooled thread
            return self.executor().submit(  # (its own copy: a context runs on one thread)
                tracing.copy_context().run, _traced_route, key, lambda: route.run(clone).body
            )
        return self.executor().submit(lambda: route.run(clone).body)

    async def run_routes(self, event: Event, run: Callable[..., Any]) -> dict[str, Any]:
        """``{route key: result body}`` of every route: concurrently, or in turn for ``array``."""
        if self.executor_type == "array":
            results = {}
            for key, route in self.routes.items():
                with tracing.span(f"route {key}", {"mlserve.step": key}):
                    results[key] = (await run(route, _event_copy(event))).body
            return results
        futures = {key: self._submit(key, route, event) for key, route in self.routes.items()}
        if run is run_sync:
            return {key: future.result() for key, future in futures.items()}
        answers = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures.values()))
        return dict(zip(futures, answers, strict=True))

    async def route_event(self, event: Event, path: str, run: RouteRun) -> Event:
        routed = event
        named = isinstance(event.body, dict) and event.body.get("operation")
        if event.method != "GET" and not (event.path or "").strip("/") and not named:
            routed = _event_copy(event)  # a merge needs whole answers: a streaming model's
            routed.path = "infer"  # chunks gathered (docs/streaming.md#what-streams)
        results = await self.run_routes(routed, run)
        merged = dict(event.body) if self.extend_event and isinstance(event.body, dict) else {}
        for key, result in results.items():
            if (
                isinstance(result, ChunkStream)
                or inspect.isgenerator(result)
                or inspect.isasyncgen(result)
            ):
                await _closed(result)  # a step that yields: its chunks cannot be merged
                raise ValueError(
                    f"route '{key}' streams: {type(self).__name__} merges whole answers"
                )
            if isinstance(result, dict):
                merged.update(result)
            else:
                merged[key] = result
        event.body = merged
        return event

    def post_init(self, mode: str = "sync") -> None:
        super().post_init(mode)
        server = self.context.server
        if server is not None:
            server.on_shutdown(
                self.close
            )  # the executor's threads or processes end with the server

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class VotingEnsemble(ParallelRun):
    """Runs every model and votes on their predictions.

    ``vote_type``: ``"regression"`` (weighted mean) or ``"classification"``
    (weighted vote, ties to the lowest class); unset, it is inferred from the
    first outputs (all whole numbers: classification). ``weights``:
    ``{route: weight}``, shown as given in the model listing and normalised
    to sum 1 for the vote; routes missing from it get 0; none means equal
    weights. ``prediction_col_name``: the key of the predictions when models
    answer ``outputs`` as a dict; with ``format_response_with_col_name_flag``
    the vote is answered under that key too. ``version`` (default ``v1``, as
    mlrun's) is the ensemble's ``model_version``.

    ``/v2/models/infer`` and ``/v2/models/<ensemble name>/infer`` vote;
    ``/v2/models/<model>/infer`` goes to that model alone.
    """

    def __init__(
        self,
        context: GraphContext | None = None,
        name: str | None = None,
        routes: dict[str, Any] | None = None,
        protocol: str | None = None,
        url_prefix: str | None = None,
        health_prefix: str | None = None,
        vote_type: str | None = None,
        executor_type: str | None = None,
        prediction_col_name: str | None = None,
        weights: dict[str, float] | None = None,
        format_response_with_col_name_flag: bool = False,
        version: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            context,
            name or "VotingEnsemble",
            routes,
            executor_type=executor_type,
            protocol=protocol,
            url_prefix=url_prefix,
            health_prefix=health_prefix,
            **kwargs,
        )
        if vote_type not in (None, *VOTE_TYPES):
            raise ValueError(f"vote_type must be one of {VOTE_TYPES}, got '{vote_type}'")
        self.vote_type = vote_type
        self.prediction_col_name = prediction_col_name or "prediction"
        self.weights = dict(weights) if weights else None
        self.format_response_with_col_name_flag = bool(format_response_with_col_name_flag)
        self.version = "v1" if version is None else version
        self._inferred_vote_type: str | None = None
        self._init_args = {
            "protocol": protocol,
            "url_prefix": url_prefix,
            "health_prefix": health_prefix,
        }

    def to_class_args(self) -> dict[str, Any]:
        args = {
            **super().to_class_args(),
            **self._init_args,
            "vote_type": self.vote_type,
            "prediction_col_name": None
            if self.prediction_col_name == "prediction"
            else self.prediction_col_name,
            "weights": self.weights,
            "format_response_with_col_name_flag": self.format_response_with_col_name_flag or None,
            "version": None if self.version == "v1" else self.version,
        }
        return {key: value for key, value in args.items() if value is not None}

    # ---- routing -----------------------------------------------------------------

    def list_models(self) -> dict[str, Any]:
        return {"models": [*self.routes, self.name], "weights": self.weights}

    async def route_event(self, event: Event, path: str, run: RouteRun) -> Event:
        target, op = self._target(event, path)
        if target is None and op is None:
            event.terminated = True
            event.body = self.list_models()
            return event
        if target is not None:
            event.path = op or ""
            return await run(self.routes[target], event)
        if event.method == "GET" and not op:
            event.body = face_metadata(await self._metadata(event, run), event)
            return event
        if event.method == "GET" and op == "ready":  # ready when every voter is
            ready = self.is_ready()
            event.body = Response({"name": self.name, "ready": ready}, 200 if ready else 503)
            return event
        return await self._vote(event, op or "infer", run)

    def _target(self, event: Event, path: str) -> tuple[str | None, str | None]:
        """``(route key or None for the ensemble, operation)``; ``(None, None)`` lists."""
        sub = path[len(self.url_prefix) :].strip("/") if path.startswith(self.url_prefix) else ""
        if not sub:
            if path.startswith(self.url_prefix) and event.method == "GET":
                return None, None
            model = event.body.get("model") if isinstance(event.body, dict) else None
            return (self._route_key(str(model)), "") if model and model != self.name else (None, "")
        match = VERSIONED_PATH.match(sub)
        if match is None:
            raise ModelNotFound(f"illegal path {path}")
        model, version, op = match["model"], match["version"], match["op"] or ""
        if model == self.name or (model in OPERATIONS and not version and model not in self.routes):
            return None, op if model == self.name else model
        return self._route_key(f"{model}:{version}" if version else model), op

    def _route_key(self, key: str) -> str:
        if key in self.routes:
            return key
        versions = [k for k in self.routes if k.partition(":")[0] == key]
        if versions:
            return sorted(versions)[-1]
        raise unknown_model(key, self.routes)

    def get_metadata(self) -> dict[str, Any]:
        """The ensemble as a model: its tensors are those its models declare."""
        metadata: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "inputs": [],
            "outputs": [],
        }
        for model in self.iter_models():
            meta = model.get_metadata()
            metadata["inputs"] = metadata["inputs"] or meta.get("inputs", [])
            metadata["outputs"] = metadata["outputs"] or meta.get("outputs", [])
        return metadata

    async def _metadata(self, event: Event, run: Callable[..., Any]) -> dict[str, Any]:
        metadata = self.get_metadata()
        if not (metadata["inputs"] and metadata["outputs"]):  # routes that are not models
            for route in self.routes.values():
                if next(route.iter_models(), None) is not None:
                    continue
                body = (await run(route, _event_copy(event))).body
                if isinstance(body, dict):
                    metadata["inputs"] = metadata["inputs"] or body.get("inputs") or []
                    metadata["outputs"] = metadata["outputs"] or body.get("outputs") or []
        return metadata

    # ---- voting ------------------------------------------------------------------

    def normalised_weights(self) -> dict[str, float]:
        """Each route's weight, summing to 1 (equal without ``weights``)."""
        if not self.weights:
            return {key: 1 / len(self.routes) for key in self.routes} if self.routes else {}
        raw = {key: float(self.weights.get(key, 0)) for key in self.routes}
        total = sum(raw.values())
        if total <= 0:
            raise InvalidInput(f"the ensemble's weights {self.weights} give its models no weight")
        return {key: value / total for key, value in raw.items()}

    async def _vote(self, event: Event, op: str, run: Callable[..., Any]) -> Event:
        body = event.body
        if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
            raise InvalidInput('Expected key "inputs" (a list) in request body')
        start, clock = datetime.now(UTC), time.perf_counter()
        # a vote needs whole answers: a streaming voter's chunks gathered
        # (docs/streaming.md#what-streams)
        event.path = "infer" if op == "infer_stream" else op
        results = await self.run_routes(event, run)
        weights = self.normalised_weights()
        predictions = np.asarray([self._predictions(results[key]) for key in self.routes])
        votes = self._apply(predictions, np.asarray([weights[key] for key in self.routes]))
        by_column = self.format_response_with_col_name_flag or any(
            isinstance(result, dict) and isinstance(result.get("outputs"), dict)
            for result in results.values()
        )
        event.body = self._response(body, votes, event.id, by_column)
        self._log(start, clock, body, event.body, op)
        if op == "infer_stream":  # as a model that does not stream: one chunk, its answer
            event.body = ChunkStream(_one_chunk(event.body), name=self.name or "")
        return event

    def _predictions(self, response: object) -> Any:
        outputs = response.get("outputs") if isinstance(response, dict) else None
        if isinstance(outputs, dict):
            if self.prediction_col_name not in outputs:
                raise InvalidInput(
                    f"prediction_col_name '{self.prediction_col_name}' is not in the "
                    f"models' outputs {sorted(outputs)}"
                )
            return outputs[self.prediction_col_name]
        if is_tensor_inputs(outputs):
            return decode_tensor(outputs[0])
        if isinstance(outputs, (np.ndarray, np.generic, tuple)):
            return np.asarray(outputs).tolist()
        if not isinstance(outputs, list):
            raise InvalidInput(f"a model of the ensemble answered no outputs list: {response!r}")
        return outputs

    def _apply(self, predictions: np.ndarray, weights: np.ndarray) -> np.ndarray:
        vote_type = self.vote_type or self._inferred_vote_type
        if vote_type is None:
            whole = np.issubdtype(predictions.dtype, np.integer) or bool(
                np.issubdtype(predictions.dtype, np.floating)
                and np.all(np.mod(predictions, 1) == 0)
            )
            vote_type = self._inferred_vote_type = "classification" if whole else "regression"
        if vote_type == "regression":
            return np.tensordot(weights, predictions.astype(float), axes=1)
        return np.asarray([_weighted_vote(column, weights) for column in predictions.astype(int).T])

    def _response(
        self, request: dict[str, Any], votes: np.ndarray, event_id: object, by_column: bool
    ) -> dict[str, Any]:
        """The vote as a model's answer; keyed by ``prediction_col_name`` when the
        flag asks or the models answered by column (as mlrun)."""
        response: dict[str, Any] = {"id": request.get("id", event_id), "model_name": self.name}
        if self.version:
            response["model_version"] = self.version
        if is_tensor_inputs(request["inputs"]):
            response["outputs"] = build_outputs(votes, decode_request(request), "output-0")
        elif by_column:
            response["outputs"] = {self.prediction_col_name: votes.tolist()}
        else:
            response["outputs"] = votes.tolist()
        return response

    def _log(
        self, start: datetime, clock: float, request: object, response: object, op: str
    ) -> None:
        """A model-log record of the ensemble itself, when monitoring is on."""
        model_logger = getattr(self, "model_logger", None)
        if model_logger is not None:
            if isinstance(request, dict) and "id" not in request and isinstance(response, dict):
                request = {**request, "id": response.get("id")}  # as mlrun's ensemble record
            microsec = int((time.perf_counter() - clock) * 1_000_000)
            model_logger.push(self, start, request, response, op, microsec, {})


async def _one_chunk(answer: object) -> AsyncIterator[Any]:
    yield answer


async def _closed(
    stream: ChunkStream | Generator[Any, Any, Any] | AsyncGenerator[Any, Any],
) -> None:
    """A stream no one will read, closed where it runs (its ``finally`` runs)."""
    if isinstance(stream, Generator):
        stream.close()
    else:
        await stream.aclose()


def _weighted_vote(classes: np.ndarray, weights: np.ndarray) -> int:
    """The class with the most weight; a tie goes to the lowest class."""
    scores: dict[int, float] = {}
    for cls, weight in zip(classes.tolist(), weights.tolist(), strict=True):
        scores[cls] = scores.get(cls, 0.0) + weight
    top = max(scores.values())
    return min(cls for cls, score in scores.items() if score >= top - 1e-9)
