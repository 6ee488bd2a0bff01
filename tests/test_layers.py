"""The package's layers import downward only, and no module imports itself in a circle
(docs/architecture.md#layers). Every import counts: a module's top, a function's
body (lazy), and ``importlib.import_module`` of a constant name. The layer table and
the import reader are in tools/layers.py, which also draws docs/images/layers.svg."""

from __future__ import annotations

import ast

from tools.layers import (
    ALLOWED_UPWARD,
    IMAGES,
    MODULES,
    imports,
    layer,
    layers_dot,
    upward_imports,
)


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_no_module_imports_a_layer_above_it() -> None:
    assert upward_imports() == ALLOWED_UPWARD


def test_each_upward_import_says_why() -> None:
    for module, target in ALLOWED_UPWARD:
        lines = MODULES[module].read_text().splitlines()
        line = imports(module)[target]
        context = "\n".join(lines[max(0, line - 4) : line])
        assert "docs/architecture.md#layers" in context, f"{module}:{line} needs its comment"


def test_no_import_circle() -> None:
    graph = {module: set(imports(module)) for module in MODULES}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circle = path[path.index(module) :] + [module]
            raise AssertionError("import circle: " + " -> ".join(circle))
        if module in done:
            return
        for target in graph[module]:
            visit(target, path + [module])
        done.add(module)

    for module in graph:
        visit(module, [])


def test_no_private_name_crosses_a_module() -> None:
    crossing = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlserve"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        crossing.append(f"{module}: {alias.name} from {node.module}")
    assert not crossing, crossing


def test_the_committed_layers_picture_matches_the_code() -> None:
    committed = (IMAGES / "layers.dot").read_text()
    assert committed == layers_dot(), (
        "docs/images/layers.dot is out of date: run `python -m tools.layers` "
        "(make docs-images) and commit docs/images/layers.dot and layers.svg"
    )
