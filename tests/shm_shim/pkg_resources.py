"""The one ``pkg_resources`` call tritonclient's shared-memory module makes (the path
of its C library): setuptools 81 and later ship no ``pkg_resources``. Put this
folder on ``sys.path`` (or ``PYTHONPATH``) only where the real one is missing."""

from __future__ import annotations

import importlib.util
import os


def resource_filename(package: str, name: str) -> str:
    """The path of ``name`` beside ``package``'s ``__init__``."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(package)
    return os.path.join(os.path.dirname(spec.origin), name)
