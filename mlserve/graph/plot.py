"""Pictures of a serving graph, drawn with graphviz (docs/graphs.md).

    graph.plot("graph.svg")          # or fn.plot(...); format from the suffix, else svg
    graph                            # in Jupyter: shows itself

Steps are boxes (a responder has a double border), routers are folders
holding their routes, queues are cylinders, error handlers are red octagons
reached by dashed edges; steps of a child function sit in a frame named after it.
"""

from __future__ import annotations

import shutil
import warnings
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
    dot.node(entry, shape="circle", fillcolor="#d7ecd9")
    steps = getattr(graph, "steps", None)
    if steps is None:  # a router topology: the router is the only step
        _add_step(dot, graph.name or "router", graph)
        dot.edge(entry, graph.name or "router")
        return dot
    _add_steps(dot, steps)
    _add_edges(dot, entry, graph, steps, targets or [])
    return dot


def _add_steps(dot: Any, steps: dict[str, Any]) -> None:
    functions = sorted({step.function for step in steps.values() if step.function})
    for name, step in steps.items():
        if not step.function:
            _add_step(dot, name, step)
    for function in functions:
        with dot.subgraph(name=f"cluster_{function}") as frame:
            frame.attr(label=f"function: {function}", style="dashed")
            for name, step in steps.items():
                if step.function == function:
                    _add_step(frame, name, step)


def _add_step(dot: Any, name: str, step: Any) -> None:
    kind = getattr(step, "kind", "task")
    attrs = {"shape": _SHAPES.get(kind, "box")}
    if getattr(step, "responder", False):
        attrs["peripheries"] = "2"
    if kind == "error":
        attrs.update(fillcolor="#fbe3e3", color="#b22222")
    dot.node(name, **attrs)
    routes = getattr(step, "routes", None)
    if kind == "router" and routes:
        with dot.subgraph(name=f"cluster_{name}") as box:
            box.attr(label=name, style="rounded")
            for key in routes:
                box.node(f"{name}/{key}", label=key, shape="ellipse", fillcolor="#fff7e0")
                box.edge(name, f"{name}/{key}", arrowhead="none")


def _add_edges(dot: Any, entry: str, graph: Any, steps: dict[str, Any], targets: list[str]) -> None:
    has_next = set()
    for name, step in steps.items():
        if step.kind == "error":
            for before in step.before:
                dot.edge(name, before)
            continue
        for after in step.after:
            dot.edge(after, name)
            has_next.add(after)
        if not step.after:
            dot.edge(entry, name)
        handler = getattr(step, "on_error", None) or graph.on_error
        if handler:
            dot.edge(name, handler, style="dashed", color="#b22222")
    leaves = [name for name, step in steps.items() if step.kind != "error" and name not in has_next]
    for target in targets:
        dot.node(target, shape="cylinder", fillcolor="#f2f2f2")
        for leaf in leaves:
            dot.edge(leaf, target)


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
