"""The model-log records (docs/monitoring.md#records), built from what the model hands
the pusher.

Records carry ``request.inputs`` and ``resp.outputs`` as plain JSON lists
whatever the request form, so a consumer reads rows and tensor requests alike:
one tensor becomes its nested list (rows), several tensors a list of nested
lists in order. Any numpy left elsewhere is written by ``dumps_strict``, and so is
NaN or an infinity: null, whatever the answers' rule, for the programs that parse the
stream (docs/monitoring.md#records).

The pusher builds one record per logged call (for file and Kafka targets on the
request thread), so the per-record work is kept small: ``success_line`` writes the
JSON of ``success_record`` without building the record (the model's fields are
encoded once), and ``when`` formats a UTC start from a per-second cache
(``datetime.isoformat`` costs several microseconds).

A call's ``start`` is a ``time.time_ns()`` reading (what the model keeps: no
datetime is built per call) or, from user code that logs through the pusher, a
``datetime``; records write either the same way.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np

from mlserve.core import tracing
from mlserve.core.clock import when, when_ns
from mlserve.core.shadow_call import primary_of
from mlserve.protocol.forms import is_tensor_inputs
from mlserve.protocol.tensors import decode_tensor, dumps_strict

__all__ = [
    "BATCH_HEADERS",
    "Call",
    "ModelFields",
    "at_ns",
    "batch_row",
    "beside_primary",
    "error_record",
    "one_record",
    "ns_of",
    "plain_tensors",
    "success_line",
    "success_record",
]

BATCH_HEADERS = ["request", "op", "resp", "when", "microsec", "metrics"]
HOST = socket.gethostname()


class Call(NamedTuple):
    """One logged call, what a model hands ``model_logger.push`` (a failed one: no
    ``response`` nor ``microsec``, its ``error`` text instead). A tuple, built positionally:
    one is built per logged call, on the request thread."""

    model: Any
    start: datetime | int
    request: Any
    response: Any
    op: str
    microsec: int | None
    metrics: dict[str, Any] | None = None
    error: str | None = None
    stream: dict[str, Any] | None = None  # a streamed call's chunks, first chunk (and end)
    trace_id: str | None = None  # the call's trace, when tracing is on


def plain_tensors(value: object) -> Any:
    """Inputs or outputs as plain lists: ndarrays, ``{name: ndarray}`` and V2 tensor objects."""
    if type(value) is list and not (value and type(value[0]) is dict):
        return value  # rows: the common case, kept cheap
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict) and value and all(isinstance(v, np.ndarray) for v in value.values()):
        return [array.tolist() for array in value.values()]
    if is_tensor_inputs(value):
        arrays = [_decoded(obj) for obj in value]
        return arrays[0] if len(arrays) == 1 else arrays
    return value


def _decoded(obj: dict[str, Any]) -> Any:
    data, shape = obj.get("data"), obj.get("shape")
    if type(data) is list and type(shape) is list and len(data) == _count(shape):
        return _nested(data, shape)  # JSON form, as the model built it: no numpy round trip
    try:
        return decode_tensor(obj).tolist()
    except Exception:  # a tensor we cannot decode is logged as it came
        return data


def _count(shape: list[Any]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _nested(flat: list[Any], shape: list[int]) -> Any:
    """A flat row-major list as nested lists of ``shape`` (a scalar for shape ``[]``)."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nested(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def at_ns(ns: int) -> datetime:
    """A ``time.time_ns()`` reading as an aware UTC datetime, to the microsecond below
    (exact: ``when`` of either is one text)."""
    return _EPOCH + timedelta(microseconds=ns // 1000)


def ns_of(start: datetime | int) -> int:
    """A call's start as nanoseconds since the epoch (a naive datetime is taken as UTC)."""
    if isinstance(start, int):  # (a datetime never is one)
        return start
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    return (start - _EPOCH) // _MICROSECOND * 1000


def _plain(message: object, key: str, copy: bool = True) -> Any:
    """A request (``key`` "inputs") or response ("outputs") with that field plain;
    ``copy=False`` (encoded at once) keeps the message itself when it is already plain."""
    if isinstance(message, dict) and key in message:
        tensors = message[key]
        plain = plain_tensors(tensors)
        if plain is tensors and not copy:
            return message
        return {**message, key: plain}
    return message


class ModelFields:
    """The fields every record of one model (or ensemble) starts with."""

    def __init__(self, model: object, worker: object, function_uri: str) -> None:
        self.model = model
        self.worker = worker
        self.function_uri = function_uri
        self.fields = self._fields()  # computed once per model; never changed
        self.shadow = "shadow" in self.fields  # its answers go beside the primary's
        self.key = str(self.fields["model"]).encode()  # the Kafka key
        # The fields' JSON without its closing brace: the head of every encoded record.
        self.head = dumps_strict(self.fields)[:-1] + b","

    def base(self) -> dict[str, Any]:
        """A fresh copy of the fields."""
        return self.fields.copy()

    def _fields(self) -> dict[str, Any]:
        model = self.model
        record: dict[str, Any] = {
            "class": type(model).__name__,
            "worker": self.worker,
            "model": getattr(model, "name", "") or "",
            "version": getattr(model, "version", "") or "",
            "host": HOST,
            "function_uri": self.function_uri,
        }
        uid = getattr(model, "model_endpoint_uid", None)
        if uid:  # as mlrun's records: the monitor reads each record's endpoint from it
            record["endpoint_id"] = uid
        labels = getattr(model, "labels", None)
        if labels:
            record["labels"] = labels
        shadow_of = getattr(model, "shadow_of", None)
        if shadow_of:  # a shadow route's model (docs/graphs.md#shadow-routes)
            record["shadow"] = True
            record["shadow_of"] = shadow_of
        return record


def beside_primary(model: object, response: Any) -> Any:
    """A shadow's answer with the primary's outputs beside its own, as ``primary_outputs``
    (docs/graphs.md#shadow-routes); a call of the shadow by its own name has none."""
    primary = primary_of(model, response)
    if primary is None:
        return response
    return {**response, "primary_outputs": plain_tensors(primary)}


def success_record(fields: ModelFields, call: Call) -> dict[str, Any]:
    """One record of one successful call."""
    _, start, request, response, op, microsec, metrics, *_ = call
    if fields.shadow:
        response = beside_primary(fields.model, response)
    record = {
        **fields.fields,
        "request": _plain(request, "inputs"),
        "op": op,
        "resp": _plain(response, "outputs"),
        "when": when(start),
        "microsec": microsec,
    }
    if metrics:
        record["metrics"] = metrics
    if call.trace_id:
        record["trace_id"] = call.trace_id
    return record


def success_line(
    fields: ModelFields,
    start: datetime | int,
    request: Any,
    response: Any,
    op: str,
    microsec: int,
    metrics: dict[str, Any] | None = None,
) -> bytes:
    """``dumps_strict(success_record(fields, Call(model, start, ...)))``, byte for byte:
    the fields come first in a record, so their JSON (encoded once) heads the JSON of the
    rest. The request thread pays for this line: the call's parts come as arguments (no
    ``Call``), and rows in and out (the common case) are recognised inline, in few steps."""
    if fields.shadow:
        response = beside_primary(fields.model, response)
    try:  # rows in and out (the common case) are plain already: recognised inline
        rows_in, rows_out = request.get("inputs"), response.get("outputs")
    except Exception:  # not dicts: the general code below decides
        rows_in = rows_out = None
    if not (type(rows_in) is list and rows_in and type(rows_in[0]) is not dict):
        request = _plain(request, "inputs", copy=False)
    if not (type(rows_out) is list and rows_out and type(rows_out[0]) is not dict):
        response = _plain(response, "outputs", copy=False)
    rest = {
        "request": request,
        "op": op,
        "resp": response,
        # a model's time_ns() start straight to when_ns: a frame less on every logged call
        "when": when_ns(start) if type(start) is int else when(start),
        "microsec": microsec,
    }
    if metrics:
        rest["metrics"] = metrics
    if tracing.on:  # the call's trace (docs/observability.md#tracing)
        trace_id = tracing.trace_id()
        if trace_id:
            rest["trace_id"] = trace_id
    return fields.head + dumps_strict(rest)[1:]


def batch_row(call: Call) -> list[Any]:
    """One row of a batched record, in the order of ``BATCH_HEADERS``."""
    _, start, request, response, op, microsec, metrics, *_ = call
    return [
        _plain(request, "inputs"),
        op,
        _plain(response, "outputs"),
        when(start),
        microsec,
        metrics or {},
    ]


def error_record(fields: ModelFields, call: Call) -> dict[str, Any]:
    """The record of a failed call."""
    record = {
        **fields.fields,
        "request": _plain(call.request, "inputs"),
        "op": call.op,
        "when": when(call.start),
        "error": call.error,
    }
    if call.trace_id:
        record["trace_id"] = call.trace_id
    return record


def one_record(fields: ModelFields, call: Call) -> dict[str, Any]:
    """The record of a call pushed on its own: a failed call's, or a streamed call's
    (its chunks gathered as the response, with ``chunks`` and ``first_chunk_microsec``;
    docs/monitoring.md#streamed-calls)."""
    if call.stream is None:
        return error_record(fields, call)
    return {**success_record(fields, call), **call.stream}
