"""``input_path`` / ``result_path``: read and write nested keys (``"y.z"``) of a body."""

from __future__ import annotations

from typing import Any

from mlserve.protocol.errors import InvalidInput

__all__ = ["get_path", "set_path"]


def get_path(body: Any, path: str | None) -> Any:
    """The part of ``body`` at ``path``; the whole body when no path is given."""
    if not path:
        return body
    value = body
    for key in path.split("."):
        try:
            value = value[key]
        except (KeyError, TypeError, IndexError) as exc:
            raise InvalidInput(f"input_path '{path}' not found in the request body") from exc
    return value


def set_path(body: object, path: str | None, result: object) -> Any:
    """Write ``result`` into ``body`` at ``path`` and return the body; with no
    path (or no dict body) the result replaces the body."""
    if not path or body is None:
        return result
    if not isinstance(body, dict):
        raise InvalidInput(f"result_path '{path}' needs a dict body, got {type(body).__name__}")
    *parents, last = path.split(".")
    node = body
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[last] = result
    return body
