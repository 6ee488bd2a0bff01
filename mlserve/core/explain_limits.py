"""A model's explanation budget, apart from its inference budget (docs/explain.md#limits).

An explanation costs tens to thousands of predictions, so ``explain`` calls get their
own threads (``explain_concurrency``), a small queue past which they answer 429
(``explain_queue``), their own deadline (``explain_timeout``, 504) and a bound on the
rows of one request (``explain_max_rows``, 413). Inference keeps its own gate: a
saturated explainer never takes a thread or a queue place from ``infer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlserve.core.gate import ModelGate
from mlserve.protocol.errors import PayloadTooLarge

__all__ = ["ExplainLimits", "check_explain_rows", "explain_gate_of", "explain_limits"]


@dataclass(frozen=True)
class ExplainLimits:
    """A model's explain limits, read from its parameters (``explain_<name>``).

    concurrency: explain calls the model runs at once, on threads of their own.
    queue: explain calls that may wait for one of them; more answer 429.
    timeout: seconds one explain call may take (504 past it; 0: the request's own).
    max_rows: rows one explain request may carry (413 past it).
    """

    concurrency: int = 1
    queue: int = 4
    timeout: float = 60.0
    max_rows: int = 100

    @classmethod
    def from_params(cls, get_param: Any) -> ExplainLimits:
        """The limits ``get_param("explain_<name>", default)`` gives; a value that is no
        number, or out of range, is a ValueError naming the parameter."""
        values: dict[str, Any] = {}
        for name, default in vars(cls()).items():
            raw = get_param(f"explain_{name}", default)
            kind = type(default)
            try:
                value = kind(raw)
            except (TypeError, ValueError):
                raise ValueError(f"explain_{name}={raw!r} is not a number") from None
            least = 1 if name in ("concurrency", "max_rows") else 0
            if value < least:
                raise ValueError(f"explain_{name} must be {least} or more, got {raw!r}")
            values[name] = value
        return cls(**values)


def explain_limits(model: Any) -> ExplainLimits:
    """The model's explain limits, read from its parameters once."""
    limits: ExplainLimits | None = getattr(model, "_explain_limits", None)
    if limits is None:
        limits = model._explain_limits = ExplainLimits.from_params(model.get_param)
    return limits


def explain_gate_of(model: Any, limits: ExplainLimits) -> ModelGate:
    """The model's explain gate (threads and queue of its own, never inline), made on
    first use."""
    gate: ModelGate | None = getattr(model, "_explain_gate", None)
    if gate is None:
        name = f"{getattr(model, 'name', '')} (explain)"
        gate = model._explain_gate = ModelGate(limits.concurrency, limits.queue, 0, name)
    return gate


def _rows(request: Any) -> int:
    """The rows of a decoded request: the first tensor's first dimension (tensor form),
    else the length of ``inputs`` when it holds rows (lists or objects)."""
    tensors = getattr(request, "tensors", None)
    if tensors:
        shape = getattr(next(iter(tensors.values())), "shape", ())
        return int(shape[0]) if shape else 1
    inputs = request.get("inputs") if isinstance(request, dict) else None
    if isinstance(inputs, list) and inputs and isinstance(inputs[0], (list, dict)):
        return len(inputs)
    return 1


def check_explain_rows(request: Any, max_rows: int) -> None:
    """413 for an explain request of more than ``max_rows`` rows."""
    rows = _rows(request)
    if rows > max_rows:
        raise PayloadTooLarge(
            f"an explain request may carry {max_rows} rows at most (the model's "
            f"explain_max_rows), got {rows}: send fewer rows per request"
        )
