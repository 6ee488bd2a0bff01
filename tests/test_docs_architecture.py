"""The docs stay true to the code: docs/architecture.md names only modules and functions
that exist, every ``docs/<guide>.md#<anchor>`` reference points at a real heading, no
file cites section numbers of a document outside the repository, and docs/security.md
lists every setting of ``FaceSettings`` and ``ServerLimits`` with its default."""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from mlserve.cli import _serve_parser, face_options
from mlserve.core.limits import ServerLimits, server_limits
from mlserve.core.settings import FaceSettings
from tools.layers import MODULES, ROOT

DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
# Where a reference to the docs, or a cited section number, may hide.
SCANNED = [ROOT / name for name in ("mlserve", "tests", "benchmarks", "docs", "examples")]
TEXT_SUFFIXES = {".py", ".md", ".proto", ".lua", ".ipynb", ".toml", ".yaml", ".yml", ".txt"}


def _scanned_files() -> list[Path]:
    """The project's own text files: what git would track there (the benchmarks' peer
    environments, caches and other hidden folders are not the project's)."""
    found = [ROOT / "README.md", ROOT / "Makefile"]
    for folder in SCANNED:
        found += [
            path
            for path in sorted(folder.rglob("*"))
            if path.suffix in TEXT_SUFFIXES
            and path.is_file()
            and "generated" not in path.parts
            and "__pycache__" not in path.parts
            and not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
        ]
    return found


# ---- docs/architecture.md names what exists ----


def _defined_names(body: list[ast.stmt]) -> set[str]:
    """Names a module or class body defines: defs, classes, assignments, imports, and
    what ``__all__`` lists (a lazy ``__getattr__`` export), through if/try blocks."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                if isinstance(node.value, (ast.List, ast.Tuple)):
                    names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If):
            names |= _defined_names(node.body) | _defined_names(node.orelse)
        elif isinstance(node, ast.Try):
            names |= _defined_names(node.body)
            for handler in node.handlers:
                names |= _defined_names(handler.body)
    return names


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


def _exists(dotted: str) -> bool:
    """Whether ``dotted`` (``mlserve.a.b``, ``mlserve.a.b.Class.method``) names a module,
    or something a module or one of its classes defines (read with ``ast``, nothing
    imported: a face's optional packages need not be installed)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in MODULES:
            break
    else:
        return False
    body: list[ast.stmt] = _tree(module).body
    for name in parts[cut:]:
        if name not in _defined_names(body):
            return False
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == name]
        body = found[0].body if found else []
    return True


def _architecture_text() -> str:
    return ARCHITECTURE.read_text()


def test_architecture_md_names_only_paths_that_exist() -> None:
    text = _architecture_text()
    paths = set(re.findall(r"\b((?:mlserve|tools|tests|docs)/[\w/.-]*\w/?)", text))
    assert len(paths) > 40
    missing = [path for path in sorted(paths) if not (ROOT / path).exists()]
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_architecture_md_names_only_modules_and_functions_that_exist() -> None:
    text = _architecture_text()
    names = set(re.findall(r"\bmlserve(?:\.[A-Za-z_]\w*)+", text))
    assert len(names) > 80
    missing = [name for name in sorted(names) if not _exists(name)]
    assert missing == [], f"docs/architecture.md names what does not exist: {missing}"


def test_architecture_md_shows_the_generated_picture_and_readme_links_it() -> None:
    assert "images/layers.svg" in _architecture_text()
    assert (DOCS / "images" / "layers.svg").exists()
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text()


# ---- references into the docs point at real headings ----


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def _anchors(path: Path) -> frozenset[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.+)", line)
        if match:
            anchor = _anchor(match[1])
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return frozenset(found)


def _references(path: Path) -> list[tuple[Path, str, str]]:
    """``(guide, anchor, as written)`` of each ``<guide>.md#<anchor>`` in ``path``, and of
    each ``](#anchor)`` link within a markdown file."""
    text = path.read_text()
    found = []
    for match in re.finditer(r"([\w./-]*?[\w-]+\.md)#([\w-]+)", text):
        written, anchor = match[1], match[2]
        candidates = [ROOT / written, path.parent / written, DOCS / Path(written).name]
        guide = next((c for c in candidates if c.is_file()), candidates[0])
        found.append((guide, anchor, match[0]))
    if path.suffix == ".md":
        found += [(path, m[1], m[0]) for m in re.finditer(r"\]\(#([\w-]+)\)", text)]
    return found


def test_every_docs_anchor_reference_points_at_a_heading() -> None:
    broken = []
    count = 0
    for path in _scanned_files():
        for guide, anchor, written in _references(path):
            count += 1
            if not guide.is_file() or anchor not in _anchors(guide):
                broken.append(f"{path.relative_to(ROOT)}: {written}")
    assert count > 40
    assert broken == [], f"references to headings that do not exist: {broken}"


def test_anchor_is_githubs() -> None:
    assert _anchor("`mlserve build`: a container and the objects that run it") == (
        "mlserve-build-a-container-and-the-objects-that-run-it"
    )
    assert _anchor("TF Serving's gRPC API") == "tf-servings-grpc-api"
    assert _anchor("Authentication (off by default)") == "authentication-off-by-default"


# ---- no cited section numbers ----

# "(S13)", "S8 asks", "S2-S4", "SPEC": an S and one or two digits standing as a word (not a
# quoted numpy dtype such as "S3"), or the word SPEC.
SECTION = re.compile(r"(?<![\"'|<>=])\bS\d{1,2}\b(?![\"'])|\bSPEC\b")


def test_no_file_cites_section_numbers_of_an_outside_document() -> None:
    cited = []
    for path in _scanned_files():
        if path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if SECTION.search(line):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert cited == [], "point at docs/<guide>.md#<heading> instead:\n" + "\n".join(cited)


def test_the_section_pattern_finds_citations_and_spares_dtypes() -> None:
    for cited in ("as asked (S13).", "S8 asks", "per S9,", "S2-S4", "the SPEC says"):
        assert SECTION.search(cited), cited
    for fine in ('("S3", "BYTES")', "dtype='S10'", "SPEC_ENV", "SERVING_SPEC_ENV", "SPECIAL"):
        assert not SECTION.search(fine), fine


# ---- docs/security.md lists every limit ----


def _limits_table() -> dict[str, dict[str, str]]:
    """The rows of docs/security.md's table under "## Limits", by setting name."""
    text = (DOCS / "security.md").read_text()
    section = text.split("\n## Limits\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        rows[cells["setting"].strip("`")] = cells
    return rows


def _shown(value: Any) -> str:
    """A default as the table writes it, in backticks (None: taken from another setting,
    which the row names in words)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if value == ():
        return "`none`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _other(value: Any) -> tuple[str, Any]:
    """A value unlike ``value`` as a flag or a variable gives it, and as it is then held."""
    if value is None:  # a number of seconds, when given
        return "2.5", 2.5
    if isinstance(value, bool):
        return "1", True
    if isinstance(value, tuple):
        return "secret", ("secret",)
    if isinstance(value, float):
        return str(value + 1.5), value + 1.5
    if isinstance(value, str):  # json_nonfinite, the one choice: another of its choices
        return "null", "null"
    return str(value + 3), value + 3


def _serve_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _serve_parser(parser.add_subparsers())
    return parser.parse_args(["serve", "target.py", *argv])


SETTINGS = [(FaceSettings, item) for item in fields(FaceSettings)] + [
    (ServerLimits, item) for item in fields(ServerLimits)
]


@pytest.mark.parametrize(("owner", "item"), SETTINGS, ids=[i.name for _, i in SETTINGS])
def test_security_md_lists_every_limit_with_its_flag_variable_and_default(
    owner: Any, item: Any
) -> None:
    rows = _limits_table()
    assert item.name in rows, f"docs/security.md#limits has no row for `{item.name}`"
    row = rows[item.name]
    default = getattr(owner(), item.name)
    assert row["default"].startswith(_shown(default)), (item.name, row["default"], default)
    assert row["answer"], f"`{item.name}`: say what a request past it gets"

    raw, held = _other(default)
    variable = re.fullmatch(r"`(MLSERVE_[A-Z_]+)(=1)?`", row["environment"])
    assert variable, row["environment"]
    assert getattr(owner.from_env({variable[1]: raw}), item.name) == held, variable[1]

    flag = re.fullmatch(r"`(--[a-z-]+)(?: [^`]*)?`", row["flag"])
    assert flag, row["flag"]
    args = _serve_args([flag[1]] if isinstance(default, bool) else [flag[1], raw])
    given = face_options(args) if owner is FaceSettings else {}
    if owner is FaceSettings:
        got = getattr(FaceSettings.from_env({}, **given), item.name)
    else:
        got = getattr(server_limits(args), item.name)
    assert got == held, (flag[1], got, held)


def test_security_md_table_has_no_stale_rows() -> None:
    known = {item.name for _, item in SETTINGS}
    assert sorted(set(_limits_table()) - known) == []
