"""Pictures of a serving graph, drawn with graphviz (docs/graphs.md).

    graph.plot("graph.svg")          # or fn.plot(...); format from the suffix, else svg
    graph                            # in Jupyter: shows itself

Steps are boxes (a responder has a double border), routers are folders
holding their routes, queues are cylinders, error handlers are red octagons
reached by dashed edges; steps of a child function sit in a frame named after it.
"""

from __future__ import annotations

import re
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["FORMATS", "plot_graph", "to_digraph"]

FORMATS = ("svg", "png")

_SHAPES = {
    "task": "box",
    "router": "folder",
    "queue": "cylinder",
    "error": "octagon",
    "flow": "component",
}


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
    entry = source or "start"
    _node(dot, entry, shape="circle", fillcolor="#d7ecd9")
    steps = getattr(graph, "steps", None)
    if steps is None:  # a router topology: the router is the only step
        _add_step(dot, graph.name or "router", graph)
        _edge(dot, entry, graph.name or "router")
        return dot
    _add_steps(dot, steps)
    _add_edges(dot, entry, graph, steps, targets or [])
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


def _add_steps(dot: Any, steps: dict[str, Any]) -> None:
    functions = sorted({step.function for step in steps.values() if step.function})
    for name, step in steps.items():
        if not step.function:
            _add_step(dot, name, step)
    for function in functions:
        with _cluster(dot, function, label=f"function: {function}", style="dashed"):
            for name, step in steps.items():
                if step.function == function:
                    _add_step(dot, name, step)


def _add_step(dot: Any, name: str, step: Any) -> None:
    kind = getattr(step, "kind", "task")
    attrs = {"shape": _SHAPES.get(kind, "box")}
    if getattr(step, "responder", False):
        attrs["peripheries"] = "2"
    if kind == "error":
        attrs.update(fillcolor="#fbe3e3", color="#b22222")
    _node(dot, name, **attrs)
    routes = getattr(step, "routes", None)
    if kind == "router" and routes:
        with _cluster(dot, name, label=name, style="rounded"):
            for key in routes:
                _node(dot, f"{name}/{key}", label=key, shape="ellipse", fillcolor="#fff7e0")
                _edge(dot, name, f"{name}/{key}", arrowhead="none")


def _add_edges(dot: Any, entry: str, graph: Any, steps: dict[str, Any], targets: list[str]) -> None:
    has_next = set()
    for name, step in steps.items():
        if step.kind == "error":
            for before in step.before:
                _edge(dot, name, before)
            continue
        for after in step.after:
            _edge(dot, after, name)
            has_next.add(after)
        if not step.after:
            _edge(dot, entry, name)
        handler = getattr(step, "on_error", None) or graph.on_error
        if handler:
            _edge(dot, name, handler, style="dashed", color="#b22222")
    leaves = [name for name, step in steps.items() if step.kind != "error" and name not in has_next]
    for target in targets:
        _node(dot, target, shape="cylinder", fillcolor="#f2f2f2")
        for leaf in leaves:
            _edge(dot, leaf, target)


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
