"""Run mlrun's own streaming tests (vendor/test_streaming.py, unmodified) against mlserve.

    python conformance/mlrun/run.py [extra pytest args]    (`make conformance` runs it)

The shared harness (``../shared/conformance/mlrun``, read-only) maps mlrun names to
mlserve's; this runner adds the names that test_streaming.py uses and the shared
``MAPPING`` lacks (``EXTRA_MAPPING``), rewrites the file into a temporary directory
with the harness's ``FileRewriter``, its conftest template and compat module, and
runs it with our ``skip.txt``. Prints each failing test, then the last line

    mlrun-port (streaming): P passed, F failed, S skipped

and exits 0 only when nothing failed (a collection error counts as a failure).
Env: MLRUN_PORT_SHARED (the shared harness folder), MLRUN_PORT_KEEP=1 (keep the
temporary directory), MLRUN_PORT_TEST_TIMEOUT (seconds per test, default 60).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SHARED = Path(os.environ.get("MLRUN_PORT_SHARED") or ROOT.parent / "shared/conformance/mlrun")
LABEL = "mlrun-port (streaming)"

# mlrun names test_streaming.py uses that the shared MAPPING lacks. An empty list: no
# mlserve equivalent (the name fails only the cases that use it, all in skip.txt).
EXTRA_MAPPING: dict[str, list[str]] = {
    "mlrun.runtimes.nuclio.serving.ServingSpec": ["mlserve.function.function:FunctionSpec"],
    "mlrun.serving.Model": ["mlserve:Model"],
    "mlrun.serving.server.v2_serving_handler": ["mlserve.runtimes.nuclio:v2_serving_handler"],
    "mlrun.serving.server.v2_serving_streaming_handler": [
        "mlserve.runtimes.nuclio:v2_serving_streaming_handler"
    ],
    "mlrun.serving.states.LLModel": [],
    "mlrun.artifacts.LLMPromptArtifact": [],
    "mlrun.datastore.model_provider.model_provider.ModelProvider": [
        "streaming_compat:ModelProvider"
    ],
    "mlrun.datastore.model_provider.mock_model_provider.MockModelProvider": [
        "streaming_compat:MockModelProvider"
    ],
}


def load_rewrite() -> ModuleType:
    """The shared harness's rewrite.py as a module, with our names added to its MAPPING."""
    for path in (SHARED, HERE, ROOT):  # its compat module, ours, and mlserve, for resolve()
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    spec = importlib.util.spec_from_file_location("mlrun_port_rewrite", SHARED / "rewrite.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"{LABEL}: no shared harness at {SHARED} (set MLRUN_PORT_SHARED)")
    rewrite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rewrite)
    rewrite.MAPPING.update(EXTRA_MAPPING)
    return rewrite


def prepare(work: Path) -> None:
    """work/tests/serving/<the vendored files, rewritten>, the conftest, compat modules, skip."""
    rewrite = load_rewrite()
    serving = work / "tests" / "serving"
    serving.mkdir(parents=True)
    (work / "tests" / "__init__.py").write_text("")
    (serving / "__init__.py").write_text("")
    shutil.copy(SHARED / "conftest_template.py", work / "tests" / "conftest.py")
    shutil.copy(SHARED / f"{rewrite.COMPAT}.py", work / f"{rewrite.COMPAT}.py")
    shutil.copy(HERE / "streaming_compat.py", work / "streaming_compat.py")
    shutil.copy(HERE / "skip.txt", work / "skip.txt")
    log = []
    for path in sorted((HERE / "vendor").glob("*.py")):
        rewriter = rewrite.FileRewriter(path.read_text(), path.name)
        (serving / path.name).write_text(rewriter.rewrite())
        log += [f"{path.name}:", *sorted(set(rewriter.log))]
    (work / "rewrite.log").write_text("\n".join(log) + "\n")


def run(work: Path, extra: list[str]) -> int:
    junit = work / "junit.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(work), str(ROOT)])}
    per_test = os.environ.get("MLRUN_PORT_TEST_TIMEOUT", "60")
    command = [sys.executable, "-m", "pytest", "tests/serving", "-q", "-p", "no:cacheprovider"]
    command += ["--rootdir", str(work), "-o", "addopts=", "--timeout", per_test]
    command += ["--junitxml", str(junit), *extra]
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    if not junit.exists():
        print((done.stdout + done.stderr)[-4000:])
        print(f"{LABEL}: pytest produced no report (exit {done.returncode})")
        print(f"{LABEL}: 0 passed, 1 failed, 0 skipped")
        return 1
    passed = failed = skipped = 0
    for case in ET.parse(junit).iter("testcase"):
        kids = {child.tag: child for child in case}
        if "skipped" in kids:
            skipped += 1
        elif "failure" in kids or "error" in kids:
            failed += 1
            problem = kids.get("failure", kids.get("error"))
            message = (problem.get("message") or problem.tag).strip().splitlines()
            print(f"  failed: {case.get('name')}: {message[0][:200] if message else ''}")
        else:
            passed += 1
    if done.returncode not in (0, 1) and failed == 0:
        print((done.stdout + done.stderr)[-4000:])
        failed = 1
    print(f"{LABEL}: {passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 else 1


def main(extra: list[str]) -> int:
    sys.dont_write_bytecode = True  # leave no __pycache__ beside the harness
    work = Path(tempfile.mkdtemp(prefix="mlrun-port-streaming."))
    try:
        prepare(work)
        return run(work, extra)
    finally:
        if os.environ.get("MLRUN_PORT_KEEP") == "1":
            print(f"{LABEL}: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
