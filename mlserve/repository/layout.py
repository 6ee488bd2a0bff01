"""The on-disk layout of a model repository (docs/repository.md#layout):
``<base>/<model>/<version>/``.

A version is a folder named by a number. Anything else under a model folder
is ignored: hidden folders, files, and names that are not numbers, so a
version can be written as ``.3`` or ``3.tmp`` and then renamed to ``3``.

Like TF Serving, mlserve expects a version folder to appear atomically (by
rename). A folder copied in place is guarded too (docs/repository.md#hot-reload):
the watcher loads a new version only once its ``fingerprint`` (every file's
path, size and mtime) has stayed the same for a quiet period, and only when
``incomplete`` finds nothing missing: a done file asked for, or the variables
of a SavedModel.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "FRAMEWORKS",
    "check_done_file",
    "detect_class",
    "fingerprint",
    "incomplete",
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
    """Every file under ``folder`` with its size and mtime: unchanged for a while means
    no copy is writing into it."""
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


def check_done_file(name: object) -> str:
    """``name`` if it names a file inside a version folder (``DONE``, ``.complete``)."""
    if (
        not isinstance(name, str)
        or not name
        or Path(name).is_absolute()
        or ".." in Path(name).parts
    ):
        raise ValueError(f"done_file must be a file name inside the version folder, got {name!r}")
    return name


def incomplete(version_dir: str | Path, done_file: str | None = None) -> str | None:
    """The file a version folder still lacks (relative to it), None when nothing is
    missing: ``done_file`` when one is asked for; for a SavedModel with a ``variables``
    folder, its ``variables.index`` and the data shards the index names. A folder
    copied in place can have its model file before the rest: loading it then fails."""
    folder = Path(version_dir)
    if done_file and not (folder / done_file).is_file():
        return done_file
    saved_model = any((folder / name).is_file() for name in ("saved_model.pb", "saved_model.pbtxt"))
    if not saved_model or not (folder / "variables").is_dir():
        return None
    index = folder / "variables" / "variables.index"
    shards = _shard_count(index)
    if shards is None:
        return "variables/variables.index"
    for shard in range(shards):
        name = f"variables/variables.data-{shard:05d}-of-{shards:05d}"
        if not (folder / name).is_file():
            return name
    return None


def _shard_count(index: Path) -> int | None:
    """The number of data shards a TensorFlow checkpoint index names (0 when its header
    is not read as expected); None while the index is missing or too short to say.

    The index is a table whose first entry, under the empty key, is the
    ``BundleHeaderProto``: ``num_shards`` is its field 1. The entry starts the file:
    three varints (shared key bytes 0, key length 0, value length), then the value.
    """
    try:
        with index.open("rb") as file:
            head = file.read(64)
    except OSError:
        return None
    numbers: list[int] = []
    at = 0
    while len(numbers) < 3:
        value, at = _varint(head, at)
        if value is None:
            return None
        numbers.append(value)
    shared, key_length, value_length = numbers
    if shared or key_length:
        return 0
    if value_length > len(head) - at:  # cut short: still being written, or not a header
        return None if len(head) < 64 else 0
    header = head[at : at + value_length]
    if header[:1] != b"\x08":  # field 1 (num_shards), a varint
        return 0
    shards, _ = _varint(header, 1)
    return shards or 0


def _varint(data: bytes, at: int) -> tuple[int | None, int]:
    """The protobuf varint at ``data[at:]`` and where it ends; None when cut short."""
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    return None, at
