"""The graph package has no import circle: steps and their wiring below,
engines above. Every import of a sibling module counts, lazy ones too."""

from __future__ import annotations

import ast
from pathlib import Path

GRAPH = Path(__file__).resolve().parents[2] / "mlserve" / "graph"

# Bottom to top: a module may import only modules listed before it.
LAYERS = [
    "classes",
    "model_step",
    "streaming",
    "plot",
    "http_steps",
    "tasks",
    "traffic",
    "shadow",
    "rollout",
    "routers",
    "merger",
    "steps",
    "queues",
    "flow",
    "storey_engine",
    "ensembles",
    "remote",
]


def sibling_imports(module: str) -> set[str]:
    """The mlserve.graph modules that ``module`` imports anywhere in its source."""
    tree = ast.parse((GRAPH / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["mlserve", "graph"] and len(parts) > 2:
                if (GRAPH / f"{parts[2]}.py").exists():
                    found.add(parts[2])
    return found


def test_every_graph_module_has_a_layer() -> None:
    modules = {path.stem for path in GRAPH.glob("*.py")} - {"__init__"}
    assert modules == set(LAYERS)


def test_no_module_imports_one_above_it() -> None:
    for position, module in enumerate(LAYERS):
        above = sibling_imports(module) - set(LAYERS[:position])
        assert not above, f"mlserve.graph.{module} imports {sorted(above)}, above it"
