"""Pictures of graphs (graphviz)."""

from __future__ import annotations

from pathlib import Path

import mlserve
from tests.graph.models import Const


def build() -> mlserve.ServingFunction:
    fn = mlserve.new_function("pic")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="prep", handler="tests.graph.models.inc").to("*", name="router").to(
        name="post", handler="(event)"
    ).respond()
    graph.add_step(name="audit", handler="tests.graph.models.record", after="prep")
    graph.error_handler(name="catch", handler="tests.graph.models.catch", full_event=True)
    fn.add_model("m1", class_name=Const)
    return fn


def test_svg_has_the_nodes_and_edges(tmp_path: Path) -> None:
    fn = build()
    target = tmp_path / "graph.svg"
    fn.spec.graph.plot(str(target), source="request")  # type: ignore[union-attr]
    svg = target.read_text()
    assert svg.startswith("<?xml")
    for node in ("request", "prep", "router", "post", "audit", "catch", "m1"):
        assert f"<title>{node}</title>" in svg or f">{node}</text>" in svg, node
    for edge in (
        "request&#45;&gt;prep",
        "prep&#45;&gt;router",
        "router&#45;&gt;post",
        "prep&#45;&gt;audit",
        "post&#45;&gt;catch",
    ):
        assert f"<title>{edge}</title>" in svg, edge


def test_png_and_function_plot(tmp_path: Path) -> None:
    fn = build()
    fn.plot(str(tmp_path / "graph"), format="png")
    assert (tmp_path / "graph.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    router_fn = mlserve.new_function("r")
    router_fn.add_model("m1", class_name=Const)
    dot = router_fn.plot()
    assert "m1" in dot.source and "start -> router" in dot.source


def test_jupyter_shows_the_graph() -> None:
    bundle = build().spec.graph._repr_mimebundle_()  # type: ignore[union-attr]
    assert "<svg" in bundle["image/svg+xml"]
