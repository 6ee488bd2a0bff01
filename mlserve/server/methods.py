"""Which methods each route of the URL surface answers (docs/serving.md#methods).

A request with another method is refused before the graph: 405, with ``Allow``
naming the route's methods. The mock server (``GraphServer.test``) and both HTTP
faces ask this one table, so a method gets the same answer in-process and on the
network. HEAD answers wherever GET does. A path outside the table (a flow's own
paths, a router under a prefix of its own) takes any method, as before.
"""

from __future__ import annotations

import re
from functools import lru_cache

from mlserve.core.events import Response

__all__ = ["method_refusal"]

_MODEL = r"/v2/models/[^/]+(?:/versions/[^/]+)?"
_TFS_MODEL = r"/v1/models/[^/:]+(?:/versions/[^/:]+|/labels/[^/:]+)?"
_READ = "GET, HEAD"

# (route, its methods as ``Allow`` lists them), first match wins (docs/serving.md#the-url-surface)
_ROUTES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), allow)
    for pattern, allow in (
        (r"/", "GET, HEAD, POST"),  # metadata; the stream form, routed by the body's model
        (r"/v2(?:/health(?:/live|/ready)?|/models(?:/stats)?)?", _READ),
        (r"/metrics|/openapi\.json|/docs", _READ),
        (_MODEL + r"/(?:ready|stats|config|traffic)", _READ),
        (_MODEL + r"/(?:infer|predict|explain|generate)(?:_stream)?", "POST"),
        (_MODEL + r"(?:/[^/]+)?", "GET, HEAD, POST"),  # metadata, inference, the model's ops
        (r"/v2/repository/.*", "POST"),
        (r"/v2/(?:system|cuda)sharedmemory(?:/region/[^/]+)?/status", _READ),
        (r"/v2/(?:system|cuda)sharedmemory(?:/region/[^/]+)?/(?:register|unregister)", "POST"),
        (_TFS_MODEL + r":[A-Za-z]+", "POST"),  # :predict, :classify, :regress; KServe's :explain
        (_TFS_MODEL + r"(?:/metadata|/gen_json|/gen_client)?", _READ),
        (r"/api/v1/projects/[^/]+/model-endpoints(?:/[^/]+)?", _READ),
    )
)


@lru_cache(maxsize=1024)  # clients repeat their paths: matched once each (short ones)
def _allow(path: str) -> tuple[str, frozenset[str]] | None:
    """``path``'s ``Allow`` value and its methods; None when any method goes."""
    for pattern, allow in _ROUTES:
        if pattern.fullmatch(path):
            return allow, frozenset(allow.split(", "))
    return None


def method_refusal(method: str, path: str) -> Response | None:
    """405 with ``Allow`` for a method ``path``'s route does not answer, else None."""
    route = path.rstrip("/") or "/"  # as the router reads it
    found = (_allow if len(route) <= 256 else _allow.__wrapped__)(route)
    if found is None or method in found[1]:
        return None
    allow = found[0]
    message = f"{method} is not allowed on {path}, only {allow}"
    return Response({"error": message}, 405, headers={"Allow": allow})
