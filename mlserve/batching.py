"""Adaptive batching: concurrent tensor requests merged into one ``predict`` call
(docs/tensorflow.md#batching).

A model opts in with ``max_batch_size`` (a class attribute or a parameter; 0
is off). Parameters, all read with ``get_param``:

- ``max_batch_size``: most rows in one call;
- ``max_batch_time``: seconds a batch waits for company, measured from its
  first request (default 0.002). A batch also starts when it is full, and
  while every batch slot is busy it keeps filling: the batch size adapts to
  the load;
- ``num_batch_threads``: batches running at once (default 1);
- ``max_queue_size``: requests waiting (not yet running) at most (default
  ``10 * max_batch_size``); one more is refused with 429 TooManyRequests.

Only tensor-form requests are merged, and only when they are compatible: the
same input names, datatypes and trailing dimensions, the same requested
outputs and the same parameters. Their tensors are concatenated along axis
0, ``predict`` sees one merged request (its ``input_objects`` carry no data),
and each output is split back by row counts. A result whose row count is not
the batch's fails the requests of that batch (a 500 naming the counts) and
no other. Rows-form requests, and requests larger than ``max_batch_size``,
run alone.

The batcher lives on the event loop; only the merged ``predict`` runs in the
worker pool. With batching on, ``preprocess``/``validate``/``postprocess``
run on the loop, so they must stay light (the defaults are).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import numpy as np
import orjson

from mlserve.core import tracing
from mlserve.core.aio import in_thread, run_in_threadpool
from mlserve.core.stats import ModelStats
from mlserve.protocol.errors import ModelError, TooManyRequests
from mlserve.protocol.forms import InferenceRequest

__all__ = ["Batcher", "BatchingRunner", "batching_runner", "max_batch_size"]

DEFAULT_BATCH_TIME = 0.002
# parameters that change only how the answer is encoded, not what predict computes
_ENCODING_PARAMETERS = ("binary_data_output",)


class _Pending:
    """One waiting request: a slotted class, made once per request (cheaper than a dataclass)."""

    __slots__ = ("future", "request", "rows", "span")
    span: Any  # the request's span context, set only when tracing

    def __init__(self, request: InferenceRequest, rows: int, future: asyncio.Future[Any]) -> None:
        self.request = request
        self.rows = rows
        self.future = future


@dataclass
class _Batch:
    key: Any
    deadline: float
    items: list[_Pending] = field(default_factory=list)
    rows: int = 0
    timer: asyncio.TimerHandle | None = None


# The key's last part for a request with nothing but ``inputs`` (and ``id``): the bytes the
# general case computes for no parameters and no other fields.
_NO_EXTRAS = orjson.dumps([{}, {}], option=orjson.OPT_SORT_KEYS)


def batch_key(request: InferenceRequest) -> tuple[tuple[Any, ...] | None, int]:
    """What requests must share to be merged, and the request's rows; (None, 0) when it
    cannot be merged (no common rows). The usual request (one tensor, no parameters or
    requested outputs) takes no sort and no dump: this runs on the loop for each request."""
    tensors = request.tensors
    if len(tensors) == 1:
        ((name, array),) = tensors.items()
        if not array.ndim:
            return None, 0
        rows = array.shape[0]
        shapes: tuple[Any, ...] = ((name, array.dtype, array.shape[1:]),)
    else:
        leading = {array.shape[0] if array.ndim else -1 for array in tensors.values()}
        if len(leading) != 1 or -1 in leading:  # (-1: a scalar, no rows)
            return None, 0
        rows = next(iter(leading))
        shapes = tuple(
            (name, array.dtype, array.shape[1:]) for name, array in sorted(tensors.items())
        )
    if len(request) == 1 or (len(request) == 2 and "id" in request):  # "inputs" (and "id") only
        return (shapes, (), _NO_EXTRAS), rows
    outputs = tuple(str(o.get("name")) for o in request.get("outputs") or () if isinstance(o, dict))
    parameters = {
        k: v for k, v in (request.get("parameters") or {}).items() if k not in _ENCODING_PARAMETERS
    }
    rest = {k: v for k, v in request.items() if k not in ("inputs", "outputs", "parameters", "id")}
    extras = orjson.dumps([parameters, rest], default=str, option=orjson.OPT_SORT_KEYS)
    return (shapes, outputs, extras), rows


def merge(items: list[_Pending]) -> InferenceRequest:
    """One request holding every item's rows, in order."""
    first = items[0].request
    tensors = {
        name: np.concatenate([item.request.tensors[name] for item in items])
        for name in first.tensors
    }
    merged = InferenceRequest(first)
    merged.tensors = tensors
    merged.input_objects = [
        {
            "name": obj["name"],
            "datatype": obj["datatype"],
            "shape": list(tensors[obj["name"]].shape),
        }
        for obj in first.input_objects
    ]
    merged["inputs"] = next(iter(tensors.values())) if len(tensors) == 1 else tensors
    merged["id"] = None
    return merged


def _rows_of(name: str, value: object, total: int) -> np.ndarray:
    array = np.asarray(value)
    rows = array.shape[0] if array.ndim else None
    if rows != total:
        raise ModelError(
            f"batched predict returned {rows} rows for output '{name}', "
            f"expected {total} (the rows of the merged requests)"
        )
    return array


def split(result: object, counts: list[int]) -> list[Any]:
    """Cut a merged result back into one result per request, checking the row count."""
    total = sum(counts)
    if isinstance(result, dict):
        names = list(result)
        pieces = [_pieces(_rows_of(name, result[name], total), counts) for name in names]
        if len(names) == 1:
            return [{names[0]: piece} for piece in pieces[0]]
        return [dict(zip(names, parts, strict=True)) for parts in zip(*pieces, strict=True)]
    if (
        isinstance(result, list)
        and result
        and all(isinstance(o, dict) and "datatype" in o for o in result)
    ):
        raise ModelError(
            "a batched predict must return an array or a dict of arrays, not tensor objects"
        )
    return _pieces(_rows_of("output-0", result, total), counts)


def _pieces(array: np.ndarray, counts: list[int]) -> list[np.ndarray]:
    """``array`` cut into consecutive views of ``counts`` rows."""
    if counts.count(1) == len(counts):  # one row each, the usual case: numpy iterates
        return list(array[:, np.newaxis])
    bounds = list(accumulate(counts, initial=0))
    return [array[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]


class Batcher:
    """Merges compatible requests of one model; see the module docstring."""

    def __init__(
        self,
        predict: Callable[[Any], Any],
        max_batch_size: int,
        max_batch_time: float = DEFAULT_BATCH_TIME,
        num_batch_threads: int = 1,
        max_queue_size: int | None = None,
        stats: ModelStats | None = None,
    ) -> None:
        self.predict = predict
        self.max_batch_size = int(max_batch_size)
        self.max_batch_time = float(max_batch_time)
        self.num_batch_threads = max(1, int(num_batch_threads))
        self.max_queue_size = int(max_queue_size or 10 * self.max_batch_size)
        self.stats = stats if stats is not None else ModelStats()
        self._open: dict[Any, _Batch] = {}  # accepting requests, by key
        self._waiting: list[_Batch] = []  # not started, oldest first
        self._queued = 0
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def queued(self) -> int:
        """Requests waiting for a batch slot."""
        return self._queued

    async def submit(self, request: InferenceRequest) -> Any:
        """The result of ``predict`` for ``request``'s rows (run merged with others)."""
        key, rows = batch_key(request)
        if key is None or rows > self.max_batch_size:
            return await self._run_alone(request)
        if self._queued >= self.max_queue_size:
            raise TooManyRequests(
                f"the batching queue is full ({self.max_queue_size} requests waiting)"
            )
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        pending = _Pending(request, rows, future)
        if tracing.on:  # the batch's span links to this request's (docs/observability.md#tracing)
            pending.span = tracing.span_context()
        self._join(loop, key, pending)
        if self._running < self.num_batch_threads:  # else the running batch's end starts it
            self._start_due(loop)
        return await future

    def _join(self, loop: asyncio.AbstractEventLoop, key: object, pending: _Pending) -> None:
        batch = self._open.get(key)
        if batch is not None and batch.rows + pending.rows > self.max_batch_size:
            del self._open[key]  # full: it starts at the next free slot
            batch = None
        if batch is None:
            batch = _Batch(key, loop.time() + self.max_batch_time)
            batch.timer = loop.call_at(batch.deadline, self._window_ended, loop, batch)
            self._open[key] = batch
            self._waiting.append(batch)
        batch.items.append(pending)
        batch.rows += pending.rows
        self._queued += 1
        if batch.rows >= self.max_batch_size:
            del self._open[key]

    def _window_ended(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        """The batch's timer fired: it is due, even when the loop's clock still reads a
        little before its deadline (uvloop's timers fire to the millisecond, often early)."""
        batch.deadline = min(batch.deadline, loop.time())
        self._start_due(loop)

    def _start_due(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start batches that are full or past their window, while slots are free."""
        now = loop.time()
        while self._running < self.num_batch_threads:
            due = next(
                (b for b in self._waiting if b.deadline <= now or self._open.get(b.key) is not b),
                None,
            )
            if due is None:
                return
            self._waiting.remove(due)
            if self._open.get(due.key) is due:
                del self._open[due.key]
            if due.timer is not None:
                due.timer.cancel()
            self._queued -= len(due.items)
            self._running += 1
            task = loop.create_task(self._execute(loop, due))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _execute(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        items = batch.items
        started = time.perf_counter_ns()
        try:
            request = items[0].request if len(items) == 1 else merge(items)
            if tracing.on:
                result = await self._traced_call(request, batch)
            else:
                result = await self._call(request)
            parts = [result] if len(items) == 1 else split(result, [item.rows for item in items])
        except Exception as exc:
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)
        else:
            for item, part in zip(items, parts, strict=True):
                if not item.future.done():
                    item.future.set_result(part)
        finally:
            self.stats.record_execution(batch.rows, time.perf_counter_ns() - started)
            self._running -= 1
            self._start_due(loop)

    async def _run_alone(self, request: InferenceRequest) -> Any:
        started = time.perf_counter_ns()
        first = next(iter(request.tensors.values()), None)
        rows = first.shape[0] if first is not None and first.ndim else 1
        try:
            return await self._call(request)
        finally:
            self.stats.record_execution(rows, time.perf_counter_ns() - started)

    async def _call(self, request: object) -> Any:
        return await in_thread(self.predict, request)

    async def _traced_call(self, request: object, batch: _Batch) -> Any:
        """``_call`` in a ``batch {model}`` span linked to each batched request's span."""
        name = str(getattr(getattr(self.predict, "__self__", None), "name", ""))
        links = [item.span for item in batch.items if getattr(item, "span", None) is not None]
        attributes = {"mlserve.model": name, "mlserve.batch.size": len(batch.items)}
        attributes["mlserve.batch.rows"] = batch.rows
        with tracing.span(f"batch {name}", attributes, links=links):
            return await self._call(request)


class BatchingRunner:
    """The dispatch runner of a batched model: ``predict`` of tensor requests goes
    through the batcher, every other hook runs in the worker pool."""

    counts_executions = True  # the batcher records one execution per merged call

    def __init__(self, model: Any, batcher: Batcher) -> None:
        self.model = model
        self.batcher = batcher

    async def user(self, fn: Callable[..., Any], *args: object) -> Any:
        if fn == self.model.predict and isinstance(args[0], InferenceRequest):
            return await self.batcher.submit(args[0])
        started = time.perf_counter_ns()
        result = await in_thread(fn, *args)
        if fn == self.model.predict:  # a request run alone is one execution
            self.model.stats.record_execution(1, time.perf_counter_ns() - started)
        return result

    async def block(self, fn: Callable[..., Any], *args: object) -> Any:
        return await run_in_threadpool(fn, *args)


def batching_runner(model: Any) -> BatchingRunner | None:
    """The model's batching runner (made on first use), or None when it has not opted in."""
    runner = model.__dict__.get("_batching_runner", False)
    if runner is False:
        runner = _make_runner(model)
        model._batching_runner = runner
    return runner


def max_batch_size(model: Any) -> int:
    """The rows one batch of ``model`` holds: its ``max_batch_size`` parameter, else the
    class attribute; 0 (or less) when it has not opted in (or is not a model: a router)."""
    size = getattr(model, "max_batch_size", 0)
    get_param = getattr(model, "get_param", None)
    return int((get_param("max_batch_size", size) if get_param else size) or 0)


def _make_runner(model: Any) -> BatchingRunner | None:
    size = max_batch_size(model)
    if size <= 0:
        return None
    batcher = Batcher(
        model.predict,
        max_batch_size=size,
        max_batch_time=float(model.get_param("max_batch_time", DEFAULT_BATCH_TIME)),
        num_batch_threads=int(model.get_param("num_batch_threads", 1)),
        max_queue_size=model.get_param("max_queue_size", None),
        stats=model.stats,
    )
    model.batcher = batcher
    return BatchingRunner(model, batcher)
