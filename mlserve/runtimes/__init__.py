"""Runtimes that host a serving function: nuclio's Python runtime (``mlserve.runtimes.nuclio``)."""

from __future__ import annotations

__all__: list[str] = []
