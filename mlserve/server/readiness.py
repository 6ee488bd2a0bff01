"""The readiness of a model the repository knows but no route serves (unloaded, or
not loaded yet): ``ready: false`` with a 503, as Triton answers, rather than the 404
of a model nobody knows (docs/protocol.md#errors)."""

from __future__ import annotations

import re

from mlserve.core.events import Response
from mlserve.server.serving import ModelRepository

__all__ = ["unserved_readiness"]

_READY = re.compile(r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/ready/?$")


def unserved_readiness(repository: ModelRepository | None, path: str) -> Response | None:
    """The answer to ``GET <path>`` (a model's ``/ready``) when ``repository`` knows the
    model (and version, when given) no route serves; None otherwise."""
    match = _READY.match(path)
    if match is None or repository is None:
        return None
    name, version = match["model"], match["version"]
    for entry in repository.index():
        if entry.get("name") == name and (not version or str(entry.get("version")) == version):
            return Response({"name": name, "ready": False}, status_code=503)
    return None
