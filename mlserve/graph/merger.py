"""``Merge``: join the branches of an async flow back into one event.

A step after several branches gets each event once per branch. ``Merge``
holds the parts of an event (joined by its id, or by ``key_path``) until all
of them arrived, then passes one event on: its body is the list of the parts'
bodies. It mirrors mlrun's ``mlrun.serving.merger.Merge``::

    dbl = graph.to(name="double", handler="double")
    dbl.to(name="add3", class_name="Adder", add=3)
    dbl.to(name="add2", class_name="Adder", add=2)
    graph.add_step(Merge(name="merge"), after=["add2", "add3"]).respond()

At most ``max_behind`` events wait for their parts (64 by default); when more
arrive, the oldest is dropped with a warning and its late parts are ignored.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from mlserve.core.events import Event
from mlserve.graph.classes import class_reference

__all__ = ["DEFAULT_MAX_BEHIND", "Merge"]

logger = logging.getLogger("mlserve.graph")

DEFAULT_MAX_BEHIND = 64


class _Parts:
    """The parts of one event that arrived so far."""

    __slots__ = ("items", "late")

    def __init__(self, item: object) -> None:
        self.items = [item]
        self.late = False


class Merge:
    """Joins the parts of an event from the steps it follows into one event."""

    def __init__(
        self,
        full_event: bool | None = None,
        key_path: str | None = None,
        max_behind: int | None = None,
        expected_num_events: int | None = None,
        name: str | None = None,
        context: object = None,
        graph_step: object = None,
        **kwargs: object,
    ) -> None:
        if max_behind is not None and max_behind < 1:
            raise ValueError(f"max_behind must be 1 or more, got {max_behind}")
        if expected_num_events is not None and expected_num_events < 1:
            raise ValueError(f"expected_num_events must be 1 or more, got {expected_num_events}")
        self.key_path = key_path
        self.max_behind = max_behind
        self.expected_num_events = expected_num_events
        # joined by event.id by default, which needs the whole event
        self.full_event = True if full_event is None and not key_path else bool(full_event)
        self.name = name
        self.context = context
        self.graph_step = graph_step
        self._uplinks = 0
        self._key_of: Callable[[Any], Any] = lambda event: event.id
        self._waiting: OrderedDict[Any, _Parts] = OrderedDict()
        self._dropped: OrderedDict[Any, _Parts] = OrderedDict()

    def to_dict(self) -> dict[str, Any]:
        """mlrun's step description: the class, the arguments given, the name."""
        args = {
            "key_path": self.key_path,
            "max_behind": self.max_behind,
            "expected_num_events": self.expected_num_events,
        }
        struct: dict[str, Any] = {
            "class_name": class_reference(type(self)),
            "class_args": {key: value for key, value in args.items() if value is not None},
        }
        if self.name:
            struct["name"] = self.name
        return struct

    def post_init(self, mode: str = "sync") -> None:
        """Count the parts to wait for: ``expected_num_events``, else the steps it follows."""
        after = getattr(self.graph_step, "after", None) or []
        self._uplinks = self.expected_num_events or len(after)
        if self.key_path:
            expression = f"lambda event: {self.key_path}"
            self._key_of = eval(expression, {}, {})  # noqa: S307 - the user's own graph

    def get_join_key(self, item: object) -> Any:
        """The key that joins the parts (override for custom logic)."""
        return self._key_of(item)

    def merge_function(self, last: Any, items: list[Any]) -> Any:
        """One event from all the parts (override for custom logic): with
        ``full_event``, the last event with the list of the parts' bodies."""
        if self.full_event:
            last.body = [item.body for item in items]
            return last
        return items

    def do_event(self, event: Event) -> Event | None:
        """The merged event once every part arrived; None while parts are missing."""
        item = event if self.full_event else event.body
        merged = self._merge(item)
        if merged is None:
            return None
        if self.full_event:
            return merged
        event.body = merged
        return event

    async def do_event_async(self, event: Event) -> Event | None:
        return self.do_event(event)

    def _merge(self, item: object) -> Any:
        if self._uplinks <= 1:
            return item
        key = self.get_join_key(item)
        dropped = self._dropped.get(key)
        if dropped is not None:  # a late part of a dropped event
            dropped.items.append(item)
            if len(dropped.items) >= self._uplinks:
                del self._dropped[key]
            logger.warning("merge %s: part of event %s arrived late, ignored", self.name, key)
            return None
        parts = self._waiting.get(key)
        if parts is None:
            self._waiting[key] = _Parts(item)
            self._drop_oldest()
            return None
        parts.items.append(item)
        if len(parts.items) < self._uplinks:
            return None
        del self._waiting[key]
        return self.merge_function(item, parts.items)

    def _drop_oldest(self) -> None:
        limit = self.max_behind or DEFAULT_MAX_BEHIND
        while len(self._waiting) > limit:
            key, parts = self._waiting.popitem(last=False)
            logger.warning(
                "merge %s: missing parts for event %s after %d newer events, dropping it",
                self.name,
                key,
                limit,
            )
            self._dropped[key] = parts
            while len(self._dropped) > limit:  # forget the oldest dropped keys too
                self._dropped.popitem(last=False)
