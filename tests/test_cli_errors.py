"""``python -m mlserve``: a user's mistake is one line on stderr with the fix and exit
status 2; the user's code's own errors show the user's frames only
(docs/serving.md#when-the-command-refuses)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from mlserve.core.version import __version__
from tests.netserver import FN, ROOT, start_server


def _mlserve(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlserve", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60, env=env)


def _refused(done: subprocess.CompletedProcess[str], said: str) -> None:
    """Exit status 2 and one line on stderr, which says ``said``."""
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def targets() -> dict[str, Path]:
    folder = Path(tempfile.mkdtemp())
    (folder / "fn.yaml").write_text("kind: serving\n")
    (folder / "notes.txt").write_text("not a function\n")
    (folder / "models.yaml").write_text("models:\n  - name: a\n    base_path: a\n")
    (folder / "broken.yaml").write_text("kind: serving\nspec: [1\n")
    return {name: folder / name for name in ("fn.yaml", "notes.txt", "models.yaml", "broken.yaml")}


USAGE_ERRORS = {
    "missing file": (["serve", "nowhere/fn.py"], "nowhere/fn.py: no such file or folder"),
    "port too big": (["serve", FN, "--port", "99999"], "'99999' is not a port"),
    "port not a number": (["serve", FN, "--grpc-port", "http"], "'http' is not a port"),
    "host not an address": (["serve", FN, "--host", "999.1.1.1"], "--host 999.1.1.1 is not"),
    "host not this machine's": (
        ["serve", FN, "--host", "192.0.2.1"],
        "--host 192.0.2.1 is not an address of this machine",
    ),
    "workers 0": (["serve", FN, "--workers", "0"], "--workers: '0': give a number of 1 or more"),
    "workers -1": (["serve", FN, "--workers", "-1"], "give a number of 1 or more"),
    "cache size on a file": (["serve", FN, "--cache-size", "3"], "--cache-size: a repository"),
    "poll interval on a file": (["serve", FN, "--poll-interval", "2"], "--poll-interval: a"),
    "two repository flags": (
        ["serve", FN, "--model-config", "m.yaml", "--cache-size", "2"],
        "--model-config, --cache-size: flags of a model repository folder",
    ),
    "a bad limit": (["serve", FN, "--request-timeout", "-2"], "request_timeout must be 0"),
    "kafka without group": (["serve", FN, "--kafka", "t@127.0.0.1:9"], "--kafka needs --group"),
    "no command": ([], "the following arguments are required: command"),
    "build: missing file": (["build", "gone.py"], "gone.py: no such file or folder"),
    "build: model config on a file": (["build", FN, "--model-config", "m.yaml"], "a repository"),
}


@pytest.mark.parametrize("case", USAGE_ERRORS, ids=list(USAGE_ERRORS))
def test_a_usage_error_is_one_line_and_status_2(case: str) -> None:
    args, said = USAGE_ERRORS[case]
    _refused(_mlserve(*args), said)


def test_a_target_that_is_not_a_function(targets: dict[str, Path]) -> None:
    _refused(_mlserve("serve", str(targets["notes.txt"])), "give a .py file, an exported function")
    yaml = str(targets["fn.yaml"])
    _refused(_mlserve("serve", yaml, "--model-config", "m.yaml"), f"and {yaml} is a file")
    models = str(targets["models.yaml"])
    _refused(_mlserve("serve", models), f"{models} is not an exported function: fn.export()")
    broken = str(targets["broken.yaml"])
    _refused(_mlserve("serve", broken), f"{broken} is not an exported function: expected ','")


MISSING = {
    "tensorflow": (["serve", "{models}"], "model half needs tensorflow, which is not installed"),
    "confluent_kafka": (
        ["serve", FN, "--kafka", "t@127.0.0.1:9", "--group", "g"],
        "Kafka needs confluent-kafka",
    ),
}


@pytest.mark.parametrize("package", MISSING, ids=list(MISSING))
def test_a_missing_optional_package_names_its_extra(package: str, tmp_path: Path) -> None:
    """A TensorFlow repository without TensorFlow, the Kafka face without its client
    (each hidden from the process by a sitecustomize)."""
    (tmp_path / "models" / "half" / "1").mkdir(parents=True)
    (tmp_path / "models" / "half" / "1" / "saved_model.pb").write_bytes(b"")
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(f"import sys\nsys.modules[{package!r}] = None\n")
    env = {**os.environ, "PYTHONPATH": f"{hide}:{ROOT}"}
    args, said = MISSING[package]
    done = _mlserve(*[a.format(models=tmp_path / "models") for a in args], env=env)
    _refused(done, said)
    extra = {"tensorflow": "tensorflow", "confluent_kafka": "kafka"}[package]
    assert done.stderr.endswith(f": pip install 'mlserve[{extra}]'\n")


def test_a_syntax_error_shows_the_users_line_only(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import mlserve\n\nfn = mlserve.new_function(\n")
    done = _mlserve("serve", "broken.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        '  File "broken.py", line 3',
        "    fn = mlserve.new_function(",
        "                             ^",
        "SyntaxError: '(' was never closed",
    ]


def test_an_exception_of_the_users_code_shows_its_frames_only(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("def settings():\n    return int('eight')\n")
    (tmp_path / "raising.py").write_text("import json\nimport helpers\n\nhelpers.settings()\n")
    done = _mlserve("serve", "raising.py", cwd=tmp_path)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    files = [line.split('"')[1] for line in lines if line.startswith('  File "')]
    assert files == ["raising.py", str(tmp_path / "helpers.py")]
    assert lines[-1] == "ValueError: invalid literal for int() with base 10: 'eight'"


def test_version() -> None:
    done = _mlserve("--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"mlserve {__version__}\n", "")


def test_log_level_applies_to_the_servers_log(tmp_path: Path) -> None:
    logs = {}
    for level in ("info", "warning"):
        with (tmp_path / f"{level}.log").open("w+") as log:
            server = start_server("--log-level", level, stderr=log)
            try:
                answer = httpx.post(f"{server.url}/v2/models/echo/infer", json={"inputs": [1]})
                assert answer.status_code == 200
            finally:
                assert server.stop() == 0
            log.seek(0)
            logs[level] = log.read()
    assert " INFO mlserve.model: loading model echo" in logs["info"]
    assert " INFO " not in logs["warning"]


EXPORTING_SOURCE = """
from pathlib import Path

import mlserve


class Named(mlserve.V2ModelServer):
    def predict(self, request):
        return [__name__]


fn = mlserve.new_function("exported")
fn.add_model("named", class_name=Named)
fn.export({export!r})  # unguarded: runs at every import of the code

if __name__ == "__main__":
    fn.export({export!r})
    Path({marker!r}).write_text("the __main__ block ran")
"""


def test_serving_an_export_runs_its_code_as_a_module_and_never_rewrites_it(
    tmp_path: Path,
) -> None:
    export, marker = tmp_path / "fn.yaml", tmp_path / "main-ran.txt"
    script = tmp_path / "app.py"
    script.write_text(EXPORTING_SOURCE.format(export=str(export), marker=str(marker)))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    marker.unlink()
    written, before = export.read_bytes(), export.stat().st_mtime_ns
    server = start_server(target=str(export))
    try:
        answer = httpx.post(f"{server.url}/v2/models/named/infer", json={"inputs": [1]})
    finally:
        assert server.stop() == 0
    assert answer.status_code == 200, answer.text
    assert answer.json()["outputs"] == ["mlserve_fn_exported"]  # a module, not __main__
    assert not marker.exists()
    assert (export.read_bytes(), export.stat().st_mtime_ns) == (written, before)
