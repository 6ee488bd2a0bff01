"""The docs' examples run: every guide's Python blocks, the curl exchanges of docs/protocol.md.

A guide's ```python blocks run in order in one namespace, in a fresh working
directory (files they write land there). A block fenced ```python title="not run"
is illustrative and skipped: keep those for what cannot run here (the tritonclient
gRPC client, which cannot share a process with mlserve.grpc). Blocks that need a
service name it by placeholder, replaced here by the session fixture's address:
`{kafka}` (a Kafka broker's host:port), `{redis}` (a redis:// URL).
"""

from __future__ import annotations

import json
import re
import runpy
import shlex
from pathlib import Path
from typing import Any
from urllib.request import urlopen

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


def _run_guide(name: str, min_blocks: int, **services: str) -> dict[str, Any]:
    """Run the guide's Python blocks in order; return their namespace."""
    blocks = _blocks(name, "python")
    assert len(blocks) >= min_blocks
    namespace: dict[str, Any] = {"__name__": f"docs_{Path(name).stem}"}
    for block in blocks:
        for service, address in services.items():
            block = block.replace("{" + service + "}", address)
        exec(compile(block, str(DOCS / name), "exec"), namespace)  # noqa: S102 - our own docs
    return namespace


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_models_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    _run_guide("models.md", 8)


def test_graphs_md_python_blocks_run_in_order(in_tmp: Path, kafka: Any) -> None:
    namespace = _run_guide("graphs.md", 7, kafka=kafka.url)
    assert namespace["stored"] == [{"score": 3.0}]
    assert (in_tmp / "flow.svg").exists()


def test_monitoring_md_python_blocks_run_in_order(
    in_tmp: Path, kafka: Any, redis_server: Any
) -> None:
    namespace = _run_guide("monitoring.md", 8, kafka=kafka.url, redis=redis_server.url)
    assert namespace["endpoint"]["status"]["error_count"] == 1
    assert (in_tmp / "mlserve-data" / "endpoints.db").exists()


def test_tensorflow_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("tensorflow.md", 5)
    assert namespace["server"].test("/v2/models/mnist/versions/3/ready")["ready"] is True


def test_frameworks_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("frameworks.md", 6)
    assert namespace["meta"]["platform"] == "onnxruntime_onnx"


def test_repository_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    _run_guide("repository.md", 5)
    assert sorted(path.name for path in (in_tmp / "models" / "fraud").iterdir()) == ["3", "4"]


def test_security_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("security.md", 1)
    assert namespace["server"].returncode == 0


def test_security_md_lists_every_security_flag() -> None:
    from mlserve.cli import _security_arguments

    text = (DOCS / "security.md").read_text()
    import argparse

    parser = argparse.ArgumentParser()
    _security_arguments(parser)
    flags = [a.option_strings[0] for a in parser._actions if a.option_strings[0] != "-h"]
    assert len(flags) == 23
    assert [flag for flag in flags if f"`{flag}" not in text] == []


def test_notebooks_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("notebooks.md", 5)
    assert (in_tmp / "doubler.yaml").exists() and namespace["fn"]._deployment is None


def test_serving_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("serving.md", 2)
    with pytest.raises(OSError):  # the blocks stopped what they deployed
        urlopen(namespace["url"] + "/v2/health/live", timeout=5)


def test_streaming_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("streaming.md", 6)
    assert namespace["received"] == ["first"]
    assert namespace["record"]["chunks"] == 3


def test_explain_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    _run_guide("explain.md", 3)


def test_migrating_from_mlrun_md_python_blocks_run_in_order(in_tmp: Path) -> None:
    namespace = _run_guide("migrating-from-mlrun.md", 3)
    assert namespace["response"].status_code == 200


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
    return _rounded(decoded)


def _rounded(value: Any) -> Any:
    """``value`` with every float kept to 9 significant digits: the last digits of a
    model's output depend on the CPU's vector instructions, the doc's numbers do not."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


@pytest.fixture(scope="module")
def example_server() -> mlserve.GraphServer:
    return runpy.run_path(str(EXAMPLE))["serving_function"]().to_mock_server()


@pytest.mark.parametrize(("command", "output"), _exchanges())
def test_protocol_md_curl_exchanges(
    example_server: mlserve.GraphServer, command: str, output: str
) -> None:
    method, path, body, content_type, status = _request(command)
    response = example_server.test(  # as curl reaches it: through the HTTP face
        path,
        body=body,
        method=method,
        content_type=content_type,
        silent=True,
        get_body=False,
        trigger="http",
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
