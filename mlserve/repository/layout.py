"""The on-disk layout of a model repository (docs/repository.md#layout):
``<base>/<model>/<version>/``.

A version is a folder named by a number. Anything else under a model folder
is ignored: hidden folders, files, and names that are not numbers, so a
version can be written as ``.3`` or ``3.tmp`` and then renamed to ``3``.

Like TF Serving, mlserve expects a version folder to appear atomically (by
rename). A folder copied in place is guarded too: the watcher loads a new
version only after its fingerprint (every file's path, size and mtime) is the
same at two polls in a row, so a half-written folder is never loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "FRAMEWORKS",
    "detect_class",
    "fingerprint",
    "is_repository",
    "scan_models",
    "scan_versions",
]

# File that marks a framework's version folder -> the server class, by name:
# resolved only when such a version loads, so the repository imports no framework.
FRAMEWORKS: dict[str, str] = {
    "saved_model.pb": "mlserve.frameworks.tensorflow.TFModelServer",
    "saved_model.pbtxt": "mlserve.frameworks.tensorflow.TFModelServer",
    "model.onnx": "mlserve.frameworks.onnx.ONNXModelServer",
    "model.ubj": "mlserve.frameworks.xgboost.XGBoostModelServer",
    "model.json": "mlserve.frameworks.xgboost.XGBoostModelServer",  # when XGBoost's JSON
    "model.joblib": "mlserve.frameworks.sklearn.SKLearnModelServer",
    "model.pkl": "mlserve.frameworks.sklearn.SKLearnModelServer",
    "model.pickle": "mlserve.frameworks.sklearn.SKLearnModelServer",
}


def _visible_dirs(path: Path) -> list[Path]:
    try:
        entries = list(path.iterdir())
    except OSError:
        return []
    return [p for p in entries if not p.name.startswith(".") and p.is_dir()]


def scan_versions(model_dir: str | Path) -> dict[int, Path]:
    """The version folders of a model: ``{version number: folder}``."""
    return {int(p.name): p for p in _visible_dirs(Path(model_dir)) if p.name.isdigit()}


def scan_models(base: str | Path) -> dict[str, Path]:
    """The model folders under ``base``: those holding at least one version folder."""
    return {p.name: p for p in _visible_dirs(Path(base)) if scan_versions(p)}


def is_repository(path: str | Path) -> bool:
    """True for a folder whose subfolders hold numbered version folders."""
    return Path(path).is_dir() and bool(scan_models(path))


def detect_class(version_dir: str | Path) -> str | None:
    """The server class name for a version folder, from the files it holds."""
    from mlserve.frameworks.xgboost import is_xgboost_json

    for marker, class_name in FRAMEWORKS.items():
        path = Path(version_dir) / marker
        if path.exists() and (marker != "model.json" or is_xgboost_json(path)):
            return class_name
    return None


def fingerprint(folder: str | Path) -> tuple[tuple[str, int, int], ...]:
    """Every file under ``folder`` with its size and mtime: equal at two polls means stable."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            try:
                stat = os.stat(path)
            except OSError:  # removed while we looked: the folder is not stable
                continue
            found.append((os.path.relpath(path, folder), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))
