"""Server-level handlers (``GraphServer.add_handler``): which ones a request meets.

A handler answers a few paths before the graph (the model repository, TF Serving's
REST API, the endpoint records) and returns None for every other request. Two marks
say what it does without calling it:

* ``answers_only(predicate)``: it answers only requests where ``predicate(method,
  path)`` holds, and is not even called for the others. The choice is made once per
  (method, path), so an inference request meets no handler at all;
* ``suspends_for(needs_loop)``: it awaits only for events where ``needs_loop(event)``
  holds (mlserve.server.inline: the others can be answered in the caller's thread).

A handler without them meets every request and may always suspend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mlserve.core.events import Event

__all__ = ["answers_only", "handlers_met", "handlers_run_inline", "suspends_for"]

H = TypeVar("H", bound=Callable[..., Any])


def answers_only(predicate: Callable[[str, str], bool]) -> Callable[[H], H]:
    """Mark a server handler: it returns None, without awaiting, for every request
    where ``predicate(method, path)`` is false."""

    def mark(handler: H) -> H:
        handler.answers = predicate  # type: ignore[attr-defined]
        return handler

    return mark


def suspends_for(needs_loop: Callable[[Event], bool]) -> Callable[[H], H]:
    """Mark a server handler: it may suspend (await) only for events where
    ``needs_loop(event)`` is true; other events it answers without awaiting."""

    def mark(handler: H) -> H:
        handler.needs_loop = needs_loop  # type: ignore[attr-defined]
        return handler

    return mark


def handlers_met(handlers: list[Any], method: str, path: str) -> tuple[Any, ...]:
    """The handlers a ``method`` request to ``path`` must be offered to, in order."""
    return tuple(
        handler
        for handler in handlers
        if getattr(handler, "answers", None) is None or handler.answers(method, path)
    )


def handlers_run_inline(handlers: tuple[Any, ...], event: Event) -> bool:
    """Whether none of ``handlers`` may suspend for ``event``."""
    for handler in handlers:
        needs_loop = getattr(handler, "needs_loop", None)
        if needs_loop is None or needs_loop(event):
            return False
    return True
