"""System shared-memory regions (Triton's extension; docs/protocol.md#system-shared-memory).

A co-located client writes its input tensors into a POSIX shared-memory object
(``/dev/shm/<key>``), registers it under a name, and names that region (with a
byte size and offset) in place of a tensor's data; requested outputs are
written into a region the same way. Each registered region is mapped once, and
every read or write is checked against what was registered: a region, offset
or byte size outside it is a 400, never a crash.
"""

from __future__ import annotations

import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any

from mlserve.protocol.errors import InvalidInput

__all__ = ["SHM_BYTE_SIZE", "SHM_OFFSET", "SHM_REGION", "SharedMemoryRegions", "shm_place"]

SHM_REGION = "shared_memory_region"
SHM_BYTE_SIZE = "shared_memory_byte_size"
SHM_OFFSET = "shared_memory_offset"

SHM_ROOT = "/dev/shm"


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    memory: mmap.mmap

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _check_key(key: object) -> str:
    """A key names one object of /dev/shm (shm_open's form, ``/name``), nothing outside it."""
    if not isinstance(key, str) or not key:
        raise InvalidInput(f"shared memory key must be a non-empty string, got {key!r}")
    name = key[1:] if key.startswith("/") else key
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise InvalidInput(f"illegal shared memory key {key!r}: a key names one /dev/shm object")
    return name


def shm_place(params: object, what: str) -> tuple[str, int, int] | None:
    """(region, offset, byte size) a tensor's ``parameters`` name; None when none."""
    if not isinstance(params, dict) or SHM_REGION not in params:
        return None
    region = params[SHM_REGION]
    if not isinstance(region, str) or not region:
        raise InvalidInput(f"{what}: {SHM_REGION} must be a region's name, got {region!r}")
    if SHM_BYTE_SIZE not in params:
        raise InvalidInput(f"{what}: {SHM_REGION} needs {SHM_BYTE_SIZE}")
    byte_size = _count(params[SHM_BYTE_SIZE], f"{what}: {SHM_BYTE_SIZE}")
    offset = _count(params.get(SHM_OFFSET, 0), f"{what}: {SHM_OFFSET}")
    return region, offset, byte_size


class SharedMemoryRegions:
    """The regions registered on a server, by name (server-wide, as Triton's are)."""

    def __init__(self) -> None:
        self._regions: dict[str, _Region] = {}
        self._lock = threading.Lock()
        self.registered = False  # any region: what each inference reads (an attribute)

    def __len__(self) -> int:
        return len(self._regions)

    def register(self, name: object, key: object, offset: object, byte_size: object) -> None:
        """Map ``byte_size`` bytes of ``/dev/shm/<key>`` from ``offset`` under ``name``."""
        if not isinstance(name, str) or not name:
            raise InvalidInput(
                f"shared memory region name must be a non-empty string, got {name!r}"
            )
        file_name = _check_key(key)
        start = _count(offset, "offset")
        size = _count(byte_size, "byte_size")
        if size == 0:
            raise InvalidInput("byte_size of a shared memory region must be above 0")
        with self._lock:
            if name in self._regions:
                raise InvalidInput(f"shared memory region '{name}' is already registered")
            self._regions[name] = _Region(
                name, str(key), start, size, _map(file_name, start + size)
            )
            self.registered = True

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        """Every region's status, or the one ``name`` (a 400 when not registered)."""
        with self._lock:
            if name is None:
                return [region.status() for region in self._regions.values()]
            return [self._find(name).status()]

    def unregister(self, name: str | None = None) -> None:
        """Unmap ``name`` (nothing when not registered, as Triton), or every region."""
        with self._lock:
            names = list(self._regions) if name is None else [name]
            for each in names:
                region = self._regions.pop(each, None)
                if region is not None:
                    region.memory.close()
            self.registered = bool(self._regions)

    def close(self) -> None:
        """Unmap every region (at shutdown)."""
        self.unregister()

    def read(self, name: str, offset: int, byte_size: int, what: str) -> bytes:
        """A copy of ``byte_size`` bytes at ``offset`` of region ``name``."""
        with self._lock:
            region = self._find(name)
            start = self._span(region, offset, byte_size, what)
            return region.memory[start : start + byte_size]

    def write(self, name: str, offset: int, byte_size: int, data: bytes, what: str) -> None:
        """Write ``data`` at ``offset`` of region ``name``, within ``byte_size`` bytes."""
        if len(data) > byte_size:
            raise InvalidInput(
                f"{what} has {len(data)} bytes, more than the {byte_size} of its shared memory"
            )
        with self._lock:
            region = self._find(name)
            start = self._span(region, offset, byte_size, what)
            region.memory[start : start + len(data)] = data

    def _find(self, name: str) -> _Region:
        region = self._regions.get(name)
        if region is None:
            raise InvalidInput(f"unable to find system shared memory region: '{name}'")
        return region

    @staticmethod
    def _span(region: _Region, offset: int, byte_size: int, what: str) -> int:
        if offset + byte_size > region.byte_size:
            raise InvalidInput(
                f"{what}: offset {offset} and byte size {byte_size} run past the "
                f"{region.byte_size} bytes of shared memory region '{region.name}'"
            )
        return region.offset + offset


def _map(file_name: str, length: int) -> mmap.mmap:
    """``length`` bytes of ``/dev/shm/<file_name>``, mapped read-write."""
    path = os.path.join(SHM_ROOT, file_name)
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise InvalidInput(f"shared memory key '/{file_name}' does not exist") from None
    except OSError as exc:
        raise InvalidInput(
            f"cannot open shared memory key '/{file_name}': {exc.strerror}"
        ) from None
    try:
        size = os.fstat(fd).st_size
        if size < length:
            raise InvalidInput(
                f"shared memory key '/{file_name}' has {size} bytes, "
                f"the region asks for {length} (offset + byte_size)"
            )
        return mmap.mmap(fd, length)
    finally:
        os.close(fd)
