"""Triton's client-side shared memory (``tritonclient.utils.shared_memory``) for the
shared-memory tests, and regions that are always destroyed."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

SHIM = Path(__file__).parent / "shm_shim"


def shm_module() -> ModuleType:
    """tritonclient's shared-memory module; where setuptools has no ``pkg_resources``
    (81 and later), with the one call it makes provided by tests/shm_shim."""
    if importlib.util.find_spec("pkg_resources") is None:
        sys.path.append(str(SHIM))
    return importlib.import_module("tritonclient.utils.shared_memory")


@contextmanager
def region(shm: ModuleType, byte_size: int) -> Iterator[tuple[Any, str]]:
    """A new system shared-memory object of ``byte_size`` bytes: (handle, key)."""
    key = f"/mlserve-test-{uuid.uuid4().hex[:12]}"
    handle = shm.create_shared_memory_region(key[1:], key, byte_size)
    try:
        yield handle, key
    finally:
        shm.destroy_shared_memory_region(handle)
