"""``fn.plot()``: on a machine without Graphviz's ``dot``, a hint and the graph still;
with it, every node drawn whatever characters its name holds."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import graphviz
import pytest

import mlserve
from mlserve.cli import load_function
from tests.fixtures import Multiplier


def test_plot_without_dot_says_what_to_install_and_returns_the_graph(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    fn = mlserve.new_function("f")
    fn.add_model("m1", class_name=Multiplier)
    fn.add_model("m2", class_name=Multiplier)
    hint = "`dot` program is not installed.*apt-get install graphviz"
    with pytest.warns(UserWarning, match=hint):
        graph = fn.plot(str(tmp_path / "graph.svg"))
    assert isinstance(graph, graphviz.Digraph)
    assert "m1" in graph.source and "m2" in graph.source
    assert not (tmp_path / "graph.svg").exists()
    assert graph._repr_mimebundle_() == {"text/plain": graph.source}  # what Jupyter shows


def test_plot_with_dot_draws(tmp_path: Path) -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m1", class_name=Multiplier)
    graph = fn.plot(str(tmp_path / "graph.svg"))
    assert "<svg" in (tmp_path / "graph.svg").read_text()
    assert "image/svg+xml" in graph._repr_mimebundle_()


def test_plot_without_the_graphviz_package_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "graphviz", None)  # as if not installed
    fn = mlserve.new_function("f")
    fn.add_model("m1", class_name=Multiplier)
    with pytest.raises(ImportError, match=r"pip install 'mlserve\[plot\]'"):
        fn.plot()


NAMES = ["flowers:v2", "a b", 'say "hi"', "back\\slash\\", "ünï/çødé", "node", "<b>x</b>", "12"]


def _drawn(svg: str, kind: str) -> list[str]:
    """The titles of the nodes (or edges) of an SVG Graphviz wrote, unescaped."""
    titles = re.findall(rf'<g id="{kind}\d+" class="{kind}">\s*<title>(.*?)</title>', svg)
    return [html.unescape(title) for title in titles]


def test_a_route_named_with_a_colon_is_a_node_connected_to_its_router(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    graph = load_function("examples/serving.py").plot(str(tmp_path / "graph.svg"))
    assert 'router -> "router/flowers:v2"' in graph.source
    svg = (tmp_path / "graph.svg").read_text()
    assert sorted(_drawn(svg, "node")) == ["router", "router/flowers", "router/flowers:v2", "start"]
    assert "router->router/flowers:v2" in _drawn(svg, "edge")
    assert "Warning" not in capfd.readouterr().err  # dot read no port


def test_every_name_is_drawn_as_it_is(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    fn = mlserve.new_function("f")
    for name in NAMES:
        fn.add_model(name, class_name=Multiplier)
    fn.plot(str(tmp_path / "router.svg"))
    svg = (tmp_path / "router.svg").read_text()
    # a DOT id keeps the backslashes its quoting doubled (the label below shows them single)
    routes = [f"router/{name}".replace("\\", "\\\\") for name in NAMES]
    assert sorted(_drawn(svg, "node")) == sorted(["start", "router", *routes])
    assert len(_drawn(svg, "edge")) == 1 + len(NAMES)
    labels = [html.unescape(text) for text in re.findall(r"<text [^>]*>(.*?)</text>", svg)]
    assert set(NAMES) <= set(labels)  # each shows its name, backslashes and quotes included

    flow_fn = mlserve.new_function("flow")
    flow = flow_fn.set_topology("flow", engine="sync")
    inc = "tests.graph.models.inc"
    flow.to(name="prep:1", handler=inc).to(name='a "b"', handler=inc).to(
        name="ünï/x", handler=inc
    ).respond()
    flow.error_handler(name="catch:me", handler="tests.graph.models.catch", full_event=True)
    flow_fn.plot(str(tmp_path / "flow.svg"), source="in:put", targets=["out stream"])
    svg = (tmp_path / "flow.svg").read_text()
    steps = ["in:put", "prep:1", 'a "b"', "ünï/x", "catch:me", "out stream"]
    assert sorted(_drawn(svg, "node")) == sorted(steps)
    assert {"in:put->prep:1", 'prep:1->a "b"', 'a "b"->ünï/x', "ünï/x->out stream"} <= set(
        _drawn(svg, "edge")
    )
    assert "Warning" not in capfd.readouterr().err
