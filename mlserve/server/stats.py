"""Statistics extension: ``GET /v2/models/stats`` and
``GET /v2/models/<m>[/versions/<v>]/stats`` (Triton's JSON form)."""

from __future__ import annotations

from typing import Any

from mlserve.protocol.errors import unknown_model
from mlserve.server.serving import Serving

__all__ = ["find_models", "model_stats"]


def find_models(server: Serving, name: str | None = None, version: str | None = None) -> list[Any]:
    """The served models named ``name`` (every one when None), of ``version`` when given."""
    models = [m for m in server.iter_models() if hasattr(m, "stats")]
    if name is not None:
        models = [m for m in models if m.name == name and (version is None or m.version == version)]
        if not models:
            label = f"{name}:{version}" if version else name
            raise unknown_model(label)
    return models


def model_stats(
    server: Serving, name: str | None = None, version: str | None = None
) -> dict[str, Any]:
    """``{"model_stats": [...]}`` of the models ``find_models`` picks."""
    return {
        "model_stats": [
            m.stats.to_dict(m.name, m.version) for m in find_models(server, name, version)
        ]
    }
