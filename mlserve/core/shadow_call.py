"""The primary's answer each shadow call under way is compared with
(docs/graphs.md#shadow-routes).

The graph registers it, by the shadow's model and the request's id, before the
shadow's copy runs and forgets it after; the model-log stream, further up, finds it
there by the id in the shadow's answer and writes it beside the shadow's own
outputs. A registry rather than a context variable: a sync model may run the copy
on one of its own threads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["expect_shadow", "forget_shadow", "primary_of"]

Key = tuple[int, str]

# (id of a shadow's model, request id) -> the primary's outputs, while the copy runs
_PRIMARIES: dict[Key, Any] = {}


def expect_shadow(models: Iterable[object], request_ids: Iterable[str], primary: Any) -> list[Key]:
    """Register ``primary`` for the calls of ``models`` that answer one of ``request_ids``;
    the keys to hand ``forget_shadow`` once the copy ran."""
    keys = [(id(model), str(rid)) for model in models for rid in request_ids]
    for key in keys:
        _PRIMARIES[key] = primary
    return keys


def forget_shadow(keys: Iterable[Key]) -> None:
    for key in keys:
        _PRIMARIES.pop(key, None)


def primary_of(model: object, response: object) -> Any:
    """The primary's outputs a shadow call of ``model`` answering ``response`` is compared
    with; None for any other call."""
    if not _PRIMARIES or not isinstance(response, dict):
        return None
    rid = response.get("id")
    return None if rid is None else _PRIMARIES.get((id(model), str(rid)))
