"""The server span of an HTTP request, for both HTTP faces: its name and route with the
model templated (``POST /v2/models/{model}/infer``), its attributes in the HTTP
semantic conventions' names, and no span at all for probes, ``/metrics`` and the
console's files (docs/observability.md#tracing).

The faces call here only when ``tracing.on``: nothing of it runs otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from functools import lru_cache
from typing import Any

from mlserve.core import tracing
from mlserve.core.events import Response
from mlserve.core.streams import ChunkStream

__all__ = ["REQUEST_ID_HEADER", "http_route", "name_request", "traced"]

REQUEST_ID_HEADER = "x-request-id"

_MODEL = re.compile(
    r"^/(?P<api>v1|v2)/(?P<what>models|repository/models)/(?P<model>[^/:]+)"
    r"(?:/versions/(?P<version>[^/:]+))?(?P<rest>.*)$"
)
_UNTRACED = frozenset({"/metrics", "/v2/health/live", "/v2/health/ready", "/console", "/console/"})


@lru_cache(maxsize=1024)  # clients ask the same few paths
def _route(path: str) -> tuple[str, str, str] | None:
    """``(route, model, version)`` of a path; None for one that gets no span."""
    if path in _UNTRACED or path.startswith(("/v2/health/", "/console/static/")):
        return None
    match = _MODEL.match(path)
    if match is None:
        return path, "", ""
    model, version, rest = match["model"], match["version"] or "", match["rest"]
    if rest == "/ready":
        return None
    route = f"/{match['api']}/{match['what']}/{{model}}"
    if version:
        route += "/versions/{version}"
    return route + rest, model, version


def http_route(method: str, path: str) -> str | None:
    """The templated route of a request, or None when it gets no span (a probe)."""
    if method in ("GET", "HEAD") and path == "/":
        return None
    found = _route(path)
    return None if found is None else found[0]


async def traced(
    answer: Callable[[], Awaitable[Response]],
    method: str,
    path: str,
    headers: Mapping[str, str],
    body_size: int,
    client: str | None,
    server_address: str | None,
    request_id: Callable[[], str] | None = None,
) -> Response:
    """``answer()`` inside the request's server span (a streamed answer's included: the
    faces write the stream before ``answer`` returns); a probe runs without one.
    ``request_id``: the request's id once answered (else its ``x-request-id``)."""
    if method in ("GET", "HEAD") and path == "/":
        return await answer()
    found = _route(path)
    if found is None:
        return await answer()
    route, model, version = found
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.path": path,
        "http.route": route,
        "http.request.body.size": body_size,
    }
    if model:
        attributes["mlserve.model"] = model
        if version:
            attributes["mlserve.model.version"] = version
    if client:
        attributes["client.address"] = client
    if server_address:
        attributes["server.address"] = server_address
    with tracing.server_span(f"{method} {route}", headers, attributes) as span:
        response = await answer()
        tracing.set_status(span, response.status_code)
        if not isinstance(response.body, ChunkStream | dict | list):
            body = response.body
            span.set_attribute("http.response.body.size", len(body) if body else 0)
        named = request_id() if request_id is not None else None
        named = named or (response.headers or {}).get(REQUEST_ID_HEADER)
        if named:
            span.set_attribute("mlserve.request.id", named)
        return response


def name_request(request_id: str) -> None:
    """Name the current server span's request (a face that knows its id only inside)."""
    from opentelemetry import trace  # tracing is on: the extra is installed

    trace.get_current_span().set_attribute("mlserve.request.id", request_id)
