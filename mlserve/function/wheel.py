"""The mlserve wheel a build folder installs
(docs/deployment.md#mlserve-build-a-container-and-the-objects-that-run-it).

No package index serves mlserve, so ``mlserve build`` puts the running mlserve
into the build context as a wheel: built from its source tree (an editable
install or a checkout) with pip and the setuptools already installed, in a
copy of the tree so the tree itself gets no ``build/`` folder; or, for an
installed wheel or sdist, packed again from the installed files. Neither
needs the network.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

__all__ = ["WheelError", "installed_wheel", "mlserve_wheel", "source_tree", "source_wheel"]

# The package folder (mlserve/function/wheel.py → mlserve/) and the folder above it.
PACKAGE = Path(__file__).resolve().parents[1]
# Installed files a wheel does not carry: the installer writes them.
_INSTALLER_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})


class WheelError(RuntimeError):
    """mlserve's wheel could not be made (the message says what to do)."""


def mlserve_wheel(out_dir: Path) -> Path:
    """mlserve's wheel, written into ``out_dir``: from the source tree when
    there is one, else from the installed package."""
    out_dir.mkdir(parents=True, exist_ok=True)
    root = source_tree()
    return source_wheel(root, out_dir) if root else installed_wheel(out_dir)


def source_tree() -> Path | None:
    """The project folder this mlserve is imported from, when it holds mlserve's
    ``pyproject.toml`` (an editable install, or a checkout on ``sys.path``)."""
    pyproject = PACKAGE.parent / "pyproject.toml"
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    return PACKAGE.parent if project.get("name") == "mlserve" else None


def source_wheel(root: Path, out_dir: Path) -> Path:
    """Build the wheel of the source tree ``root`` with ``pip wheel``, offline
    (no build isolation, no index), from a copy of its top-level files and package."""
    missing = [name for name in ("setuptools", "wheel") if not importlib.util.find_spec(name)]
    if missing:
        raise WheelError(
            f"building mlserve's wheel from {root} needs {' and '.join(missing)}: "
            f"pip install {' '.join(missing)} (or give --mlserve-requirement)"
        )
    with tempfile.TemporaryDirectory(prefix="mlserve-wheel-") as tmp:
        copy = Path(tmp) / "src"
        copy.mkdir()
        for path in root.iterdir():
            if path.is_file() and not path.name.startswith("."):
                shutil.copy2(path, copy / path.name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(root / PACKAGE.name, copy / PACKAGE.name, ignore=ignore)
        wheels = Path(tmp) / "wheels"
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        command += ["--no-index", "--quiet", "--wheel-dir", str(wheels), str(copy)]
        result = subprocess.run(command, capture_output=True, text=True)
        built = sorted(wheels.glob("mlserve-*.whl"))
        if result.returncode != 0 or not built:
            reason = _reason(result.stderr + result.stdout)
            raise WheelError(f"pip could not build mlserve's wheel from {root}: {reason}")
        target = out_dir / built[0].name
        shutil.copy2(built[0], target)
    return target


def _reason(output: str) -> str:
    """The line of pip's output that says what failed: the last exception raised
    (by the build backend), else pip's own ``error:`` line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"[\w.]*(Error|Exception): ", line)]
    errors = [line for line in lines if line.startswith("error:")]
    return (raised or errors or ["pip wrote no wheel"])[-1]


def installed_wheel(out_dir: Path) -> Path:
    """Pack the installed mlserve (its files as ``RECORD`` lists them) into a
    wheel again: the package and its ``.dist-info`` (metadata, entry points)."""
    dist = importlib.metadata.distribution("mlserve")
    files = [
        file
        for file in dist.files or []
        if not file.as_posix().startswith("../")  # scripts: pip writes them from entry points
        and "__pycache__" not in file.parts
        and not (file.parts[0].endswith(".dist-info") and file.name in _INSTALLER_FILES)
    ]
    names = {file.as_posix() for file in files}
    info = next((file.parts[0] for file in files if file.parts[0].endswith(".dist-info")), "")
    if f"{PACKAGE.name}/__init__.py" not in names or f"{info}/WHEEL" not in names:
        raise WheelError(
            "mlserve's installed files were not found to pack into a wheel: "
            "give --mlserve-requirement"
        )
    target = out_dir / f"mlserve-{dist.version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in files:
            data = Path(str(dist.locate_file(file))).read_bytes()
            wheel.writestr(file.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{file.as_posix()},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return target
