"""The package's layers, read from its imports; and the picture of them.

``LAYERS`` is the layer table of docs/architecture.md#layers, bottom to top: a
module may import its own layer and the ones below, and the faces are siblings
that never import each other. ``imports`` reads every import of a module with
``ast``: a module's top, a function's body (a lazy import), and
``importlib.import_module`` of a constant name. tests/test_layers.py checks the
rules; ``python -m tools.layers`` (``make docs-images``) writes
docs/images/layers.dot and renders docs/images/layers.svg from the same reading,
so the picture cannot drift from the code (tests/test_layers.py compares the
committed DOT with what the code gives now).
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mlserve"
IMAGES = ROOT / "docs" / "images"

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
    ("entry", ("mlserve.runner", "mlserve.client", "mlserve.cli", "mlserve.__main__", "mlserve")),
]
FACES = ("mlserve.http", "mlserve.grpc", "mlserve.kafka")
# The ground floor: the layers below this position (protocol, core) every layer may use.
GROUND = 2

# The imports that climb, on purpose, each with a comment at its line saying why.
ALLOWED_UPWARD = {
    ("mlserve.repository", "mlserve.function.repository"),
}


def modules() -> dict[str, Path]:
    """Every module of the package (the generated gRPC stubs aside), by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
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
            if "generated" in target.split("."):
                continue  # protoc's stubs: a leaf of their package, not one of its modules
            if target == "mlserve" or target.startswith("mlserve."):
                target = owner(target)
                if target != module:
                    found.setdefault(target, node.lineno)
    return found


def layer(module: str) -> int:
    """The position in ``LAYERS`` of the layer ``module`` belongs to (longest prefix)."""
    best = (-1, 0)
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[1]:
                best = (position, len(prefix))
    assert best[0] >= 0, f"{module} has no layer: add it to LAYERS"
    return best[0]


def face(module: str) -> str | None:
    """The face (``mlserve.http``, ``mlserve.grpc``, ``mlserve.kafka``) ``module`` is part of."""
    return next((f for f in FACES if module == f or module.startswith(f + ".")), None)


def upward_imports() -> set[tuple[str, str]]:
    """(importer, imported) pairs that climb a layer or cross from one face to another."""
    found = set()
    for module in MODULES:
        for target in imports(module):
            sibling_face = face(module) and face(target) and face(module) != face(target)
            if layer(target) > layer(module) or sibling_face:
                found.add((module, target))
    return found


# ---- the picture ----


def unit(module: str) -> str:
    """The node ``module`` is drawn in: its LAYERS prefix (a subpackage or top-level module)."""
    prefixes = [p for _, group in LAYERS for p in group]
    return max(
        (p for p in prefixes if module == p or module.startswith(p + ".")),
        key=len,
    )


def unit_edges() -> Counter[tuple[str, str]]:
    """Imports between units, aggregated: (importer, imported) -> modules-level imports."""
    edges: Counter[tuple[str, str]] = Counter()
    for module in MODULES:
        for target in imports(module):
            source, sink = unit(module), unit(target)
            if source != sink:
                edges[source, sink] += 1
    return edges


def _label(name: str) -> str:
    if name == "mlserve":
        return "mlserve/__init__.py"
    tail = name.removeprefix("mlserve.")
    return f"{tail}.py" if (PACKAGE / f"{tail}.py").exists() else f"{tail}/"


def _node_id(name: str) -> str:
    return '"' + name + '"'


def layers_dot() -> str:
    """The layers as graphviz DOT: one cluster per layer, bottom layer at the bottom; a
    node per subpackage or top-level module; an edge per importing pair, from the
    importer down to what it imports, thicker for more module-to-module imports,
    dashed red where it climbs on purpose (``ALLOWED_UPWARD``)."""
    edges = unit_edges()
    upward = {(unit(a), unit(b)) for a, b in ALLOWED_UPWARD}
    lines = [
        "// Generated by `python -m tools.layers` (make docs-images) from mlserve's imports;",
        "// do not edit: tests/test_layers.py checks that it matches the code.",
        "digraph layers {",
        '  graph [newrank=true, nodesep=0.25, ranksep=0.35, fontname="Helvetica",'
        ' fontsize=12, labelloc=t, label="mlserve: an arrow goes from a module to one it'
        ' imports (thicker: more imports; lighter: into the ground floor, core and protocol)"];',
        '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", color="#4a6fa5",'
        ' fontname="Helvetica", fontsize=11, height=0.3];',
        '  edge [color="#53657f", arrowsize=0.5];',
    ]
    for position, (name, prefixes) in reversed(list(enumerate(LAYERS))):
        lines += [
            f"  subgraph cluster_{position:02d}_{name} {{",
            f'    label="{name}"; labeljust=l; style=rounded; color="#c5cfdd";'
            ' fontcolor="#33415c"; fontsize=10;',
            f"    {{ rank=same; {' '.join(_node_id(p) for p in prefixes)} }}",
        ]
        lines += [f'    {_node_id(p)} [label="{_label(p)}"];' for p in prefixes]
        lines.append("  }")
    # One layer per row, top to bottom: invisible edges between neighbouring layers.
    firsts = [prefixes[0] for _, prefixes in reversed(LAYERS)]
    lines += [
        f"  {_node_id(a)} -> {_node_id(b)} [style=invis];"
        for a, b in zip(firsts, firsts[1:], strict=False)
    ]
    order = {p: (i, j) for i, (_, group) in enumerate(LAYERS) for j, p in enumerate(group)}
    for (source, sink), count in sorted(
        edges.items(), key=lambda e: (order[e[0][0]], order[e[0][1]])
    ):
        width = 1 + math.log2(count) / 2
        attributes = [f"penwidth={width:.2f}", f'tooltip="{source} imports {sink} ({count})"']
        if layer(sink) < GROUND:  # every layer stands on these: drawn lighter
            attributes.append('color="#c3ccd8"')
        if (source, sink) in upward:
            attributes += ['color="#c0392b"', "style=dashed", "constraint=false"]
        lines.append(f"  {_node_id(source)} -> {_node_id(sink)} [{', '.join(attributes)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_images(folder: Path = IMAGES) -> tuple[Path, Path]:
    """Write ``layers.dot`` and render ``layers.svg`` into ``folder``."""
    import graphviz  # the `plot` extra (and `dev`); `dot` must be installed

    folder.mkdir(parents=True, exist_ok=True)
    dot = folder / "layers.dot"
    dot.write_text(layers_dot())
    svg = folder / "layers.svg"
    svg.write_bytes(graphviz.Source(dot.read_text()).pipe(format="svg"))
    return dot, svg


def main() -> None:
    for path in write_images():
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
