"""The package's layers import downward only, and no module imports itself in a circle
(docs/architecture.md#layers). Every import counts: a module's top, a function's
body (lazy), and ``importlib.import_module`` of a constant name."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mlserve"

# Bottom to top. A module may import its own layer and the ones below; the faces are
# siblings and none imports another.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("protocol", ("mlserve.protocol",)),
    ("core", ("mlserve.core",)),
    ("model", ("mlserve.batching", "mlserve.model")),
    ("frameworks", ("mlserve.frameworks",)),
    ("graph", ("mlserve.graph",)),
    ("repository", ("mlserve.repository",)),
    ("monitoring", ("mlserve.monitoring",)),
    ("server", ("mlserve.server",)),
    ("faces", ("mlserve.http", "mlserve.grpc", "mlserve.kafka")),
    ("function", ("mlserve.function",)),
    ("runtimes", ("mlserve.runtimes",)),
    ("entry", ("mlserve.runner", "mlserve.cli", "mlserve.__main__", "mlserve")),
]
FACES = ("mlserve.http", "mlserve.grpc", "mlserve.kafka")

# The imports that climb, on purpose, each with a comment at its line saying why.
ALLOWED_UPWARD = {
    ("mlserve.repository", "mlserve.function.repository"),
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "generated" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


MODULES = modules()


def owner(name: str) -> str:
    """The module that defines ``name`` (a module, or a name inside one)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(module: str) -> dict[str, int]:
    """The mlserve modules ``module`` imports anywhere, with the line of the first."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in MODULES else base for t in targets]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for target in targets:
            if target == "mlserve" or target.startswith("mlserve."):
                target = owner(target)
                if target != module:
                    found.setdefault(target, node.lineno)
    return found


def layer(module: str) -> int:
    best = (-1, 0)
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[1]:
                best = (position, len(prefix))
    assert best[0] >= 0, f"{module} has no layer: add it to LAYERS"
    return best[0]


def face(module: str) -> str | None:
    return next((f for f in FACES if module == f or module.startswith(f + ".")), None)


def upward_imports() -> set[tuple[str, str]]:
    found = set()
    for module in MODULES:
        for target in imports(module):
            sibling_face = face(module) and face(target) and face(module) != face(target)
            if layer(target) > layer(module) or sibling_face:
                found.add((module, target))
    return found


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
