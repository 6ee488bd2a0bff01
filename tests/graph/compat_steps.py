"""Steps for the mlrun-compat tests, loaded with ``code_to_function(filename=...)``
(so they travel inside the exported function, as user code does)."""

from __future__ import annotations

from typing import Any

import numpy as np


class Echo:
    """mlrun's demo ``Echo``: a class step called through ``do(event)``."""

    def __init__(self, context: Any = None, name: str | None = None, **kw: Any) -> None:
        self.name = name

    def do(self, x: Any) -> Any:
        return x


class Add:
    def __init__(self, value: int = 1) -> None:
        self.value = value

    def do(self, x: int) -> int:
        return x + self.value


class Opaque:
    """Not JSON: a flow ending here has no body to send."""


def tag_a(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "a": 1}


def tag_b(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "b": 2}


def to_array(body: Any) -> Any:
    return np.arange(3) * body


def to_numbers(body: Any) -> Any:
    if body == "opaque":
        return Opaque()
    return {"f": np.float32(0.5), "i": np.int64(body), "l": [np.int32(1)]}


def to_opaque(body: Any) -> Opaque:
    return Opaque()


def fail(body: Any) -> Any:
    raise ValueError(f"bad {body}")


def on_error(event: Any) -> dict[str, Any]:
    return {"error": event.error, "origin": event.origin_state}
