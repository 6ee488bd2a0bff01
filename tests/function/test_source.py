"""A function's code from a .py file, a notebook's marked cells, the running
notebook (JPY_SESSION_NAME, Jupyter's sessions API), or a script's ``__main__``;
the cells a kernel ran are tests/function/test_notebook.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import mlserve
from mlserve.function import source
from tests.function.conftest import JupyterServer, Sessions

TESTDATA = Path(__file__).parents[1] / "testdata"
NOTEBOOK = TESTDATA / "markers.ipynb"
ROOT = Path(__file__).parents[2]


def test_notebook_code_follows_all_three_markers() -> None:
    code = source.notebook_code(NOTEBOOK)
    assert "class Doubler" in code and "class Tripler" in code and "FACTOR = 3" in code
    assert "exploration" not in code  # `# mlserve: ignore` cell
    assert "IGNORED" not in code  # `# mlrun: ignore` cell
    assert "EARLY" not in code  # before `# mlrun: start-code`
    assert "LATE" not in code and "code_to_function" not in code  # after `# mlserve: end-code`
    assert "pip install" not in code and "%time" not in code  # shell and magic lines
    assert "mlserve:" not in code and "mlrun:" not in code


def test_code_to_function_from_a_notebook(tmp_path: Path) -> None:
    fn = mlserve.code_to_function("marked", filename=str(NOTEBOOK), kind="serving")
    fn.add_model("double", class_name="Doubler")
    fn.add_model("triple", class_name="Tripler")
    server = fn.to_mock_server()
    assert server.test("/v2/models/triple/infer", body={"inputs": [2]})["outputs"] == [6]
    exported = mlserve.import_function(fn.export(str(tmp_path / "fn.yaml")))
    assert exported.spec.source == source.notebook_code(NOTEBOOK)
    again = exported.to_mock_server()
    assert again.test("/v2/models/double/infer", body={"inputs": [2]})["outputs"] == [4]


def test_code_to_function_reads_only_py_and_ipynb(tmp_path: Path) -> None:
    (tmp_path / "code.txt").write_text("x = 1")
    with pytest.raises(ValueError, match="reads .py and .ipynb files, got"):
        mlserve.code_to_function("f", filename=str(tmp_path / "code.txt"))


def test_code_to_function_without_filename_takes_the_running_notebook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", str(NOTEBOOK))  # as Jupyter Server and VS Code set it
    fn = mlserve.code_to_function("running", kind="serving")
    assert fn.spec.source == source.notebook_code(NOTEBOOK)
    assert fn.spec.filename == str(NOTEBOOK)


def test_code_to_function_without_filename_outside_a_notebook_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    with pytest.raises(ValueError, match="this is no notebook: give filename=.*JPY_SESSION_NAME"):
        mlserve.code_to_function("nowhere", kind="serving")


def test_the_sessions_api_names_the_kernels_notebook(jupyter_server: JupyterServer) -> None:
    Sessions.sessions = [
        {"path": "other.ipynb", "kernel": {"id": "k-other"}},
        {"path": "markers.ipynb", "kernel": {"id": "k-1"}},
    ]
    jupyter_server.announce(root_dir=TESTDATA)
    (server,) = source._running_servers()
    assert source._session_path(server, "k-1") == str(NOTEBOOK)
    assert source._session_path(server, "k-unknown") is None
    assert source._session_path({**server, "token": "wrong"}, "k-1") is None


_SCRIPT = """
import mlserve

class Halver(mlserve.V2ModelServer):
    def predict(self, request):
        return [x / 2 for x in request["inputs"]]

if __name__ == "__main__":
    fn = mlserve.new_function("script-fn")
    fn.add_model("half", class_name=Halver)
    print(fn.export("fn.yaml"))
"""


def test_a_scripts_main_classes_travel_with_the_export(tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text(textwrap.dedent(_SCRIPT))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=env, check=True)
    spec = yaml.safe_load((tmp_path / "fn.yaml").read_text())
    assert "functionSourceCode" in spec["spec"]["build"]
    (tmp_path / "script.py").unlink()  # the export alone serves
    server = mlserve.import_function(str(tmp_path / "fn.yaml")).to_mock_server()
    assert server.test("/v2/models/half/infer", body={"inputs": [3]})["outputs"] == [1.5]


_NO_FILE = """
import mlserve

class Loose(mlserve.V2ModelServer):
    pass

fn = mlserve.new_function("loose")
fn.add_model("m", class_name=Loose)
fn.deploy()
"""


def test_main_classes_of_no_notebook_or_script_refuse_to_deploy_in_one_line(
    tmp_path: Path,
) -> None:
    """``python -c``: no file, no kernel history; the refusal names the way out."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JPY_SESSION_NAME", None)
    done = subprocess.run(
        [sys.executable, "-c", _NO_FILE], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "ValueError: cannot find the code of Loose (defined in __main__, outside a notebook "
        "or script): set JPY_SESSION_NAME to the notebook's path, or give the code with "
        "code_to_function(name, filename=...)"
    )


def _main_class(name: str) -> type:
    """A model class as a notebook cell defines it: in ``__main__``."""
    return type(name, (mlserve.V2ModelServer,), {"__module__": "__main__"})


def test_a_notebooks_main_classes_travel_with_the_export(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", str(NOTEBOOK))
    fn = mlserve.new_function("from-main")
    fn.add_model("triple", class_name=_main_class("Tripler"))
    exported = mlserve.import_function(fn.export(str(tmp_path / "fn.yaml")))
    assert exported.spec.source == source.notebook_code(NOTEBOOK)
    server = exported.to_mock_server()
    assert server.test("/v2/models/triple/infer", body={"inputs": [1]})["outputs"] == [3]


def test_a_main_class_outside_the_markers_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", str(NOTEBOOK))
    fn = mlserve.new_function("unmarked")
    fn.add_model("m", class_name=_main_class("Unmarked"))
    with pytest.raises(ValueError, match="does not define Unmarked: put the class between"):
        fn.to_yaml()
