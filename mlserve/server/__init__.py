"""The graph server: one code path from an Event to a Response, for every face."""

from __future__ import annotations

from typing import Any

from mlserve.core.events import Event, MockEvent, Response, Trigger

__all__ = ["Event", "GraphServer", "MockEvent", "Response", "Trigger", "create_graph_server"]


def __getattr__(name: str) -> Any:
    # The server module imports the graph, which imports models; load it on first use.
    if name in ("GraphServer", "create_graph_server"):
        from mlserve.server import graph_server

        return getattr(graph_server, name)
    raise AttributeError(name)
