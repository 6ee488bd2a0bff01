"""The docs' examples run: Python blocks of docs/models.md, curl exchanges of docs/protocol.md."""

from __future__ import annotations

import json
import re
import runpy
import shlex
from pathlib import Path
from typing import Any

import pytest

import mlserve

DOCS = Path(__file__).parent.parent / "docs"
EXAMPLE = Path(__file__).parent.parent / "examples" / "serving.py"
FORM = "application/x-www-form-urlencoded"  # what `curl -d` sends without -H


def _blocks(name: str, language: str) -> list[str]:
    """The blocks' code, padded with blank lines so tracebacks show the doc's line numbers."""
    text = (DOCS / name).read_text()
    return [
        "\n" * text.count("\n", 0, match.start(1)) + match[1]
        for match in re.finditer(rf"```{language}\n(.*?)```", text, flags=re.S)
    ]


def test_models_md_python_blocks_run_in_order() -> None:
    blocks = _blocks("models.md", "python")
    assert len(blocks) >= 8
    namespace: dict[str, Any] = {"__name__": "docs_models"}
    for block in blocks:
        exec(compile(block, "docs/models.md", "exec"), namespace)  # noqa: S102 - our own docs


def _exchanges() -> list[tuple[str, str]]:
    lines = [line for block in _blocks("protocol.md", "console") for line in block.splitlines()]
    return [(line[2:], lines[i + 1]) for i, line in enumerate(lines) if line.startswith("$ curl")]


def _request(command: str) -> tuple[str, str, bytes | None, str | None, int]:
    command, _, status = command.partition("  # ")
    args = shlex.split(command)[1:]
    url, body, content_type, method = "", None, None, "GET"
    while args:
        arg = args.pop(0)
        if arg == "-d":
            body, method = args.pop(0).encode(), "POST"
            content_type = content_type or FORM
        elif arg == "-H":
            content_type = args.pop(0).split(":", 1)[1].strip()
        elif arg == "-X":
            method = args.pop(0)
        elif not arg.startswith("-"):
            url = arg
    path = "/" + url.split("/", 1)[1] if "/" in url else "/"
    return method, path, body, content_type, int(status or 200)


def _comparable(text: str | bytes) -> Any:
    decoded = json.loads(text)
    if isinstance(decoded, dict):
        decoded.pop("timestamp", None)
    return decoded


@pytest.fixture(scope="module")
def example_server() -> mlserve.GraphServer:
    return runpy.run_path(str(EXAMPLE))["serving_function"]().to_mock_server()


@pytest.mark.parametrize(("command", "output"), _exchanges())
def test_protocol_md_curl_exchanges(
    example_server: mlserve.GraphServer, command: str, output: str
) -> None:
    method, path, body, content_type, status = _request(command)
    response = example_server.test(
        path, body=body, method=method, content_type=content_type, silent=True, get_body=False
    )
    assert response.status_code == status
    assert _comparable(response.body) == _comparable(output)


def test_protocol_md_has_every_url_row() -> None:
    paths = {_request(command)[1] for command, _ in _exchanges()}
    assert len(paths) >= 12
    assert {"/v2/health/live", "/v2/health/ready", "/v2", "/", "/v2/models"} <= paths


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DOCS.parent / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", text, flags=re.S)
    assert block is not None
    exec(compile(block[1], "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - our own docs
    assert "'outputs': [10, 20, 30]" in capsys.readouterr().out


def test_example_function_runs_as_a_script() -> None:
    runpy.run_path(str(EXAMPLE), run_name="__main__")
