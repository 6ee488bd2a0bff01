"""Toy steps and models for the graph tests (module level: importable by name,
so process workers and exported graphs find them)."""

from __future__ import annotations

import threading
from typing import Any

from mlserve import V2ModelServer

seen: list[Any] = []
seen_lock = threading.Lock()


def record(body: Any) -> Any:
    """A leaf step that keeps what reaches it."""
    with seen_lock:
        seen.append(body)
    return body


def inc(x: int) -> int:
    return x + 1


def double(x: int) -> int:
    return x * 2


def boom(body: Any) -> Any:
    raise ValueError("boom")


def catch(event: Any) -> dict[str, Any]:
    return {"error": event.error, "origin": event.origin_state}


def with_context(body: Any, context: Any) -> Any:
    return {"body": body, "param": context.get_param("p")}


def add_tag(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "tag": body.get("tag", "") + "+"}


def merge_a(body: dict[str, Any]) -> dict[str, Any]:
    return {"a": body["x"] + 1}


def merge_b(body: dict[str, Any]) -> dict[str, Any]:
    return {"b": body["x"] * 2}


class Scale:
    """A class step called through ``do(body)``; name and context are injected."""

    def __init__(self, factor: int = 2, name: str | None = None, context: Any = None) -> None:
        self.factor = factor
        self.name = name
        self.context = context

    def do(self, body: Any) -> Any:
        return {"value": body * self.factor, "step": self.name}


class NoInjection:
    """A class whose constructor takes no name/context: nothing is injected."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    def do(self, body: Any) -> Any:
        return body + self.offset


class EventStep:
    """A class step called through ``do_event(event)``."""

    def do_event(self, event: Any) -> Any:
        event.body = {"path": event.path, "body": event.body}
        return event


class Const(V2ModelServer):
    """Predicts ``value`` for every input row."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [self.get_param("value", 0)] * len(request["inputs"])


class Echo(V2ModelServer):
    """Predicts each input row (times ``factor``)."""

    def predict(self, request: dict[str, Any]) -> Any:
        factor = self.get_param("factor", 1)
        return [row * factor for row in request["inputs"]]


class Labelled(V2ModelServer):
    """Answers outputs as a dict: the predictions under ``prediction``."""

    def predict(self, request: dict[str, Any]) -> Any:
        return {"prediction": [self.get_param("value", 0)] * len(request["inputs"]), "extra": 1}
