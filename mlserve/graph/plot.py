"""Pictures of a serving graph, drawn with graphviz (docs/graphs.md).

    graph.plot("graph.svg")          # or fn.plot(...); format from the suffix, else svg
    graph                            # in Jupyter: shows itself

Steps are boxes (a responder has a double border), routers are folders
holding their routes, queues are cylinders, error handlers are red octagons
reached by dashed edges; steps of a child function sit in a frame named after it.

``walk_graph`` is the one walk of the graph: the picture is drawn from it, and
the web console's ``/console/api/graph`` sends it as data (docs/console.md).
"""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FORMATS",
    "GraphEdge",
    "GraphNode",
    "GraphWalk",
    "plot_graph",
    "to_digraph",
    "walk_graph",
]

FORMATS = ("svg", "png")

_SHAPES = {
    "task": "box",
    "router": "folder",
    "queue": "cylinder",
    "error": "octagon",
    "flow": "component",
}


@dataclass(frozen=True)
class GraphNode:
    """One node: the entry, a step, a router's route, or an output the flow writes to.

    ``kind``: "entry", "output", a route's "route", else the step's kind ("task",
    "router", "queue", "error", "flow"); ``parent``: a route's router."""

    id: str
    label: str
    kind: str
    step: Any = None
    function: str | None = None
    responder: bool = False
    parent: str | None = None


@dataclass(frozen=True)
class GraphEdge:
    """``kind``: "next" (the flow), "route" (a router to its route), "error" (a step
    to its error handler) or "output" (a last step to an output)."""

    tail: str
    head: str
    kind: str = "next"


@dataclass
class GraphWalk:
    """A flow or a router as nodes and edges, in drawing order."""

    topology: str  # "router" or "flow"
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)


def walk_graph(
    graph: Any, source: str | None = None, targets: list[str] | None = None
) -> GraphWalk:
    """The nodes and edges of a flow or a router (the entry named ``source``, default
    ``"start"``; ``targets``: outputs after the last steps, e.g. a stream the flow writes)."""
    entry = source or "start"
    steps = getattr(graph, "steps", None)
    walk = GraphWalk("router" if steps is None else "flow", [GraphNode(entry, entry, "entry")])
    if steps is None:  # a router topology: the router is the only step
        name = graph.name or "router"
        _walk_step(walk, name, graph)
        walk.edges.append(GraphEdge(entry, name))
        return walk
    functions = sorted({step.function for step in steps.values() if step.function})
    for name, step in steps.items():
        if not step.function:
            _walk_step(walk, name, step)
    for function in functions:
        for name, step in steps.items():
            if step.function == function:
                _walk_step(walk, name, step)
    _walk_edges(walk, entry, graph, steps, targets or [])
    return walk


def _walk_step(walk: GraphWalk, name: str, step: Any) -> None:
    kind = getattr(step, "kind", "task")
    function = getattr(step, "function", None) or None
    responder = bool(getattr(step, "responder", False))
    walk.nodes.append(GraphNode(name, name, kind, step, function, responder))
    routes = getattr(step, "routes", None)
    if kind == "router" and routes:
        for key, route in routes.items():
            node = f"{name}/{key}"
            walk.nodes.append(GraphNode(node, key, "route", route, function, parent=name))
            walk.edges.append(GraphEdge(name, node, "route"))


def _walk_edges(
    walk: GraphWalk, entry: str, graph: Any, steps: dict[str, Any], targets: list[str]
) -> None:
    has_next = set()
    for name, step in steps.items():
        if step.kind == "error":
            for before in step.before:
                walk.edges.append(GraphEdge(name, before))
            continue
        for after in step.after:
            walk.edges.append(GraphEdge(after, name))
            has_next.add(after)
        if not step.after:
            walk.edges.append(GraphEdge(entry, name))
        handler = getattr(step, "on_error", None) or graph.on_error
        if handler:
            walk.edges.append(GraphEdge(name, handler, "error"))
    leaves = [name for name, step in steps.items() if step.kind != "error" and name not in has_next]
    for target in targets:
        walk.nodes.append(GraphNode(target, target, "output"))
        walk.edges.extend(GraphEdge(leaf, target, "output") for leaf in leaves)


def to_digraph(
    graph: Any,
    source: str | None = None,
    targets: list[str] | None = None,
    title: str | None = None,
) -> Any:
    """The graphviz ``Digraph`` of a flow or a router.

    ``source`` names the entry node (default ``"start"``); ``targets`` adds
    output nodes after the last steps (e.g. a stream the flow writes to).
    """
    try:
        import graphviz
    except ImportError as exc:
        raise ImportError("plotting a graph needs graphviz: pip install 'mlserve[plot]'") from exc

    dot = graphviz.Digraph(
        name=title or "graph",
        graph_attr={"rankdir": "LR", "fontname": "Helvetica"},
        node_attr={"fontname": "Helvetica", "style": "rounded,filled", "fillcolor": "#eef3fb"},
    )
    walk = walk_graph(graph, source, targets)
    routes: dict[str, list[GraphNode]] = {}
    for node in walk.nodes:
        if node.parent is not None:
            routes.setdefault(node.parent, []).append(node)
    steps = [node for node in walk.nodes if node.kind not in ("entry", "route", "output")]
    for node in walk.nodes:
        if node.kind == "entry":
            _node(dot, node.id, shape="circle", fillcolor="#d7ecd9")
        elif node.kind == "output":
            _node(dot, node.id, shape="cylinder", fillcolor="#f2f2f2")
    for node in steps:
        if node.function is None:
            _draw_step(dot, node, routes.get(node.id, []))
    for function in sorted({node.function for node in steps if node.function}):
        with _cluster(dot, function, label=f"function: {function}", style="dashed"):
            for node in steps:
                if node.function == function:
                    _draw_step(dot, node, routes.get(node.id, []))
    for edge in walk.edges:
        if edge.kind == "error":
            _edge(dot, edge.tail, edge.head, style="dashed", color="#b22222")
        elif edge.kind != "route":  # drawn in the router's frame
            _edge(dot, edge.tail, edge.head)
    return dot


_PLAIN_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = {"node", "edge", "graph", "digraph", "subgraph", "strict"}


def _id(text: str) -> str:
    """``text`` as a DOT id or attribute value: quoted unless plain, so that every
    character is part of the name (graphviz's own ``edge()`` reads ``a:b`` as node
    ``a``, port ``b``); backslashes doubled, so a label shows them as they are."""
    if _PLAIN_ID.fullmatch(text) and text.lower() not in _KEYWORDS:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _attrs(attrs: dict[str, str]) -> str:
    return " [" + " ".join(f"{key}={_id(value)}" for key, value in attrs.items()) + "]"


def _node(dot: Any, name: str, **attrs: str) -> None:
    dot.body.append(f"\t{_id(name)}{_attrs(attrs) if attrs else ''}\n")


def _edge(dot: Any, tail: str, head: str, **attrs: str) -> None:
    dot.body.append(f"\t{_id(tail)} -> {_id(head)}{_attrs(attrs) if attrs else ''}\n")


@contextmanager
def _cluster(dot: Any, name: str, **attrs: str) -> Iterator[None]:
    """A framed subgraph: what is added to ``dot`` inside the block is drawn in it."""
    dot.body.append(f"\tsubgraph {_id('cluster_' + name)} {{\n")
    start = len(dot.body)
    dot.body.extend(f"\t{key}={_id(value)}\n" for key, value in attrs.items())
    yield
    dot.body[start:] = ["\t" + line for line in dot.body[start:]]  # indented inside the frame
    dot.body.append("\t}\n")


def _draw_step(dot: Any, node: GraphNode, routes: list[GraphNode]) -> None:
    attrs = {"shape": _SHAPES.get(node.kind, "box")}
    if node.responder:
        attrs["peripheries"] = "2"
    if node.kind == "error":
        attrs.update(fillcolor="#fbe3e3", color="#b22222")
    _node(dot, node.id, **attrs)
    if routes:
        with _cluster(dot, node.id, label=node.id, style="rounded"):
            for route in routes:
                _node(dot, route.id, label=route.label, shape="ellipse", fillcolor="#fff7e0")
                _edge(dot, node.id, route.id, arrowhead="none")


def plot_graph(
    graph: object,
    filename: str | None = None,
    format: str | None = None,
    source: str | None = None,
    targets: list[str] | None = None,
    **kw: Any,
) -> Any:
    """Draw ``graph``; with ``filename`` also write the picture (svg or png)."""
    if graph is None:
        raise ValueError("the function has no graph to plot: use set_topology() or add_model()")
    dot = to_digraph(graph, source, targets, kw.pop("title", None))
    if shutil.which("dot") is None:
        return _without_dot(dot, filename)
    if filename:
        path = Path(filename)
        fmt = format or (path.suffix.lstrip(".") if path.suffix.lstrip(".") in FORMATS else "svg")
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got '{fmt}'")
        stem = path.with_suffix("") if path.suffix.lstrip(".") == fmt else path
        dot.render(filename=str(stem), format=fmt, cleanup=True, **kw)
    elif format:
        dot.format = format
    return dot


NO_DOT = (
    "Graphviz's `dot` program is not installed, so the graph is not drawn: install it "
    "(apt-get install graphviz, brew install graphviz, or conda install graphviz); "
    "meanwhile the returned graphviz.Digraph holds the graph (print(graph.source))"
)


def _without_dot(dot: Any, filename: str | None) -> Any:
    """The Digraph, undrawn: a warning says what to install; Jupyter shows its source."""
    warnings.warn(NO_DOT + (f"; {filename} was not written" if filename else ""), stacklevel=3)
    dot._repr_mimebundle_ = lambda include=None, exclude=None, **kw: {"text/plain": dot.source}
    return dot
