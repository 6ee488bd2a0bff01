"""The notebook road, run headless in a real Jupyter kernel (nbclient, and
``jupyter nbconvert --execute``): the example notebook defines a model class, tries
it with the mock server, deploys it, invokes it, exports it and serves the export
from another directory; killing the kernel ends the deployed server. Without a
notebook name (``JPY_SESSION_NAME``), the export is the cells the kernel ran."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pytest
import yaml
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.util import run_sync

import mlserve
from mlserve.function.source import notebook_code
from tests.function.conftest import JupyterServer, Sessions

ROOT = Path(__file__).parents[2]
NOTEBOOK = ROOT / "examples" / "notebooks" / "serving.ipynb"
MARKERS = ROOT / "tests" / "testdata" / "markers.ipynb"


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """The example notebook, copied to a work folder."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    return Path(shutil.copy(NOTEBOOK, workdir / NOTEBOOK.name))


@pytest.fixture
def kernel_env(example: Path, kernelspec: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example notebook, its path where Jupyter Server tells its kernels
    (``JPY_SESSION_NAME``)."""
    monkeypatch.setenv("JPY_SESSION_NAME", str(example))
    return example


@pytest.fixture
def headless(kernelspec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec whose kernels start as headless runners start them: no
    ``JPY_SESSION_NAME``, no Jupyter server to ask."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    return kernelspec


def _servers_on(port: int) -> list[int]:
    """Pids of live `mlserve serve ... --port <port>` processes."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"serve" in args and str(port).encode() in args and state not in ("Z", "X"):
            found.append(int(proc.name))
    return found


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _road(notebook: nbformat.NotebookNode) -> int:
    """Check the executed example's outputs; the deployed server's port."""
    outputs = [_text(cell) for cell in notebook.cells if cell.cell_type == "code"]
    assert outputs[3] == "[3.0, 6.0]"  # the mock server
    port = int(re.search(r"deployed at http://127\.0\.0\.1:(\d+)", outputs[4])[1])
    assert outputs[4].endswith("[3.0, 6.0]")  # fn.invoke: the deployed server answered
    answer = json.loads(outputs[6].strip())  # served from another directory
    assert answer["outputs"] == [15.0]
    return port


def _exported_code(path: Path) -> str:
    """The code an exported function carries."""
    build = yaml.safe_load(path.read_text())["spec"]["build"]
    return base64.b64decode(build["functionSourceCode"]).decode()


def _ended(port: int) -> list[int]:
    """Pids of servers still on ``port`` 15 seconds on, killed then (none leaks)."""
    deadline = time.monotonic() + 15
    while _servers_on(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _servers_on(port)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_the_example_notebook_runs_from_mock_to_an_exported_server(
    kernel_env: Path, kernelspec: str
) -> None:
    notebook = nbformat.read(kernel_env, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name=kernelspec,
        resources={"metadata": {"path": str(kernel_env.parent)}},
    )
    client.execute(cleanup_kc=False)
    try:
        port = _road(notebook)
        exported = _exported_code(kernel_env.parent / "notebook-demo.yaml")
        assert exported == notebook_code(kernel_env)  # the file JPY_SESSION_NAME names
        deployed = _servers_on(port)
        assert len(deployed) == 1
        run_sync(client.km.interrupt_kernel)()  # SIGINT to the kernel's process group
        time.sleep(1)
        assert _servers_on(port) == deployed  # interrupting a cell leaves the server serving
    finally:
        run_sync(client.km.shutdown_kernel)(now=True)  # SIGKILL: no atexit, no clean-up
    assert _ended(port) == [], "the deployed server outlived the kernel"


def test_nbconvert_runs_the_example_headless(example: Path, headless: str) -> None:
    """Plain ``jupyter nbconvert --execute``, no notebook name: the export is the
    cells the kernel ran, markers followed, the same code the file gives; the
    deployed server answers and ends with the kernel nbconvert shuts down."""
    jupyter = Path(sys.executable).with_name("jupyter")
    command = [str(jupyter), "nbconvert", "--to", "notebook", "--execute", example.name]
    command += ["--output", "executed.ipynb", f"--ExecutePreprocessor.kernel_name={headless}"]
    done = subprocess.run(command, cwd=example.parent, timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    port = _road(nbformat.read(example.parent / "executed.ipynb", as_version=4))
    assert _ended(port) == [], "the deployed server outlived nbconvert's kernel"
    exported = _exported_code(example.parent / "notebook-demo.yaml")
    assert exported == notebook_code(example)
    assert exported.startswith("import numpy as np") and "deploy" not in exported


_MARKED = [
    "# nuclio: ignore\nexplored = 'an ignored cell: left out'",
    "import nuclio\nEARLY = 'before start-code: left out'",
    "# mlserve: start-code\nimport mlserve",
    "%nuclio cmd -c pip install nothing-at-all\n!echo a shell line\n%time FACTOR = 3\nFACTOR = 3",
    "%%nuclio cmd -c\npip install nothing-either",
    "class Tripler(mlserve.V2ModelServer):\n"
    "    def predict(self, request):\n"
    "        return [x * FACTOR for x in request['inputs']]",
    "# mlrun: ignore\nIGNORED = 'left out'",
    "# nuclio: end-code\n"
    "fn = mlserve.new_function('headless')\n"
    "fn.add_model('triple', class_name=Tripler)\n"
    "fn.export('fn.yaml')",
    "named = mlserve.code_to_function(kind='serving')\n"
    "print(named.metadata.name, repr(named.spec.filename))\n"
    "written = named.export('named.yaml')",
]


def test_nbclient_without_a_notebook_name_exports_the_cells_that_ran(
    headless: str, tmp_path: Path
) -> None:
    """Markers, ignore comments, ``%nuclio`` magics and shell lines read from the
    kernel's history exactly as nuclio-jupyter reads them from the file."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in _MARKED])
    path = tmp_path / "marked.ipynb"
    nbformat.write(notebook, path)
    client = NotebookClient(
        notebook, timeout=120, kernel_name=headless, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    code = notebook_code(path)
    assert _exported_code(tmp_path / "fn.yaml") == code
    assert _exported_code(tmp_path / "named.yaml") == code
    assert _text(notebook.cells[-1]) == "notebook ''\n"  # no file: the default name
    for left_out in ("explored", "EARLY", "nothing", "echo", "%", "IGNORED", "new_function"):
        assert left_out not in code
    served = mlserve.import_function(str(tmp_path / "fn.yaml")).to_mock_server()
    assert served.test("/v2/models/triple/infer", body={"inputs": [2]})["outputs"] == [6]


def test_the_notebooks_exported_code_is_its_marked_cells(kernel_env: Path) -> None:
    code = notebook_code(kernel_env)
    assert code.startswith("import numpy as np")
    assert "class Scaler" in code and "new_function" not in code and "deploy" not in code
    assert os.environ["JPY_SESSION_NAME"] == str(kernel_env)


def test_a_kernel_finds_its_notebook_through_the_sessions_api(
    kernelspec: str, jupyter_server: JupyterServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``JPY_SESSION_NAME`` (an older Jupyter Server): the kernel asks the running
    servers which session it serves, as nuclio-jupyter does."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(MARKERS, folder / "served.ipynb")
    jupyter_server.announce(root_dir=folder)
    cell = nbformat.v4.new_code_cell(
        "import mlserve\n"
        "fn = mlserve.code_to_function('found', kind='serving')\n"
        "print(fn.spec.filename, 'class Tripler' in fn.spec.source)"
    )
    kernel_id = str(uuid.uuid4())  # Jupyter Server names the connection file after it
    Sessions.sessions = [
        {"path": "other.ipynb", "kernel": {"id": "not-this-kernel"}},
        {"path": "served.ipynb", "kernel": {"id": kernel_id}},
    ]
    connection = jupyter_server.runtime / f"kernel-{kernel_id}.json"
    km = AsyncKernelManager(kernel_name=kernelspec, connection_file=str(connection))
    notebook = nbformat.v4.new_notebook(cells=[cell])
    NotebookClient(notebook, km=km, timeout=120, kernel_name=kernelspec).execute()
    assert _text(cell).split() == [str(folder / "served.ipynb"), "True"]
