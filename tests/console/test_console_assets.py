"""The console's static files keep the promises the browser tests cannot see one by
one (docs/console.md): every module they import ships, nothing is fetched from another
origin, no data can become markup, nothing inline for the Content-Security-Policy to
refuse, and the whole page stays small."""

from __future__ import annotations

import re
from pathlib import Path

CONSOLE = Path(__file__).parents[2] / "mlserve" / "console"
SCRIPTS = sorted(CONSOLE.glob("*.js"))
SVG_NS = "http://www.w3.org/2000/svg"


def test_index_loads_only_its_own_files_and_nothing_inline() -> None:
    html = (CONSOLE / "index.html").read_text()
    assert re.findall(r"<script[^>]*>", html) == [
        '<script type="module" src="/console/static/app.js">'
    ]
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler"
    for ref in re.findall(r'(?:src|href)="([^"#]+)"', html):
        if ref.startswith("data:"):
            continue
        assert ref.startswith("/console/static/"), ref
        assert (CONSOLE / ref.removeprefix("/console/static/")).is_file(), ref


def test_every_import_ships_and_nothing_turns_data_into_markup() -> None:
    assert SCRIPTS
    for script in SCRIPTS:
        code = script.read_text()
        for name in re.findall(r'^import .* from "\./([^"]+)";$', code, flags=re.M):
            assert (CONSOLE / name).is_file(), (script.name, name)
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"):
            assert banned not in code, (script.name, banned)
        assert not re.search(r"\beval\(|new Function\(|setTimeout\(\s*[\"'`]", code), script.name
        urls = set(re.findall(r"https?://[^\s\"'`)]+", code)) - {SVG_NS}
        assert urls == set(), (script.name, urls)


def test_the_page_is_small() -> None:
    total = sum(path.stat().st_size for path in CONSOLE.iterdir() if path.is_file())
    assert total < 150_000, total  # the first load's 300 KB include the data
