"""Framework servers: ``V2ModelServer`` subclasses for common model formats.

Each lives in its own module and imports its framework there, so importing
this package loads no framework.
"""

from __future__ import annotations

__all__: list[str] = []
