"""``file://path`` or a plain path: one JSON line per record (the embedded default)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mlserve.protocol.tensors import dumps_strict

__all__ = ["FileStream", "path_of"]


def path_of(url: str) -> Path:
    """The file of ``file://path`` or of a plain path (``~`` expanded)."""
    if url.startswith("file://"):
        parts = urlsplit(url)
        url = parts.netloc + parts.path
    return Path(os.path.expanduser(url))


class FileStream:
    """Appends records as JSON lines; the file is opened on the first push."""

    uses_keys = False  # push_json's keys (model names) are not written: the pusher keeps none

    def __init__(self, url: str, **args: object) -> None:
        self.path = path_of(url)
        self._file: Any = None

    def push(self, records: list[dict[str, Any]]) -> None:
        self.push_json([dumps_strict(record) for record in records], [])

    def push_json(self, lines: list[bytes], keys: list[bytes]) -> None:
        """Records already encoded (by the pusher): one write() for the whole push."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for the server's life
        if not lines:
            return
        self._file.write(b"\n".join(lines))  # ``lines`` stays as the caller gave it
        self._file.write(b"\n")
        self._file.flush()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
