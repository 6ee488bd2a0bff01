"""Every step of a graph description, for the checks an export makes on them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["classes_in_main", "iter_steps"]


def iter_steps(step: object) -> Iterator[Any]:
    """``step`` and, depth first, its routes and the steps of its flows."""
    if step is None:
        return
    yield step
    for child in [*getattr(step, "routes", {}).values(), *getattr(step, "steps", {}).values()]:
        yield from iter_steps(child)


def classes_in_main(graph: object) -> list[type]:
    """The classes the graph uses that live in ``__main__`` (a notebook, a script)."""
    found: dict[type, None] = {}
    for step in iter_steps(graph):
        cls = getattr(step, "class_name", None)
        if isinstance(cls, type) and cls.__module__ == "__main__":
            found[cls] = None
    return list(found)
