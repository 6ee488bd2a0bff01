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

from mlserve.core import tracing
from mlserve.core.events import Response
from mlserve.core.streams import ChunkStream

__all__ = ["REQUEST_ID_HEADER", "answered", "http_route", "name_request", "opened", "traced"]

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


def opened(
    method: str,
    path: str,
    headers: Mapping[str, str],
    body_size: int,
    client: str | None,
    server_address: str | None,
) -> tracing.Span | None:
    """The request's server span, to enter around its answer; None for a probe. Its
    attributes are written only when its trace is sampled."""
    if method in ("GET", "HEAD") and path == "/":
        return None
    found = _route(path)
    if found is None:
        return None
    route, model, version = found
    span = tracing.server_span(f"{method} {route}", headers, None, lowercase=True)
    if span.sampled:
        attributes = span.attributes
        attributes["http.request.method"] = method
        attributes["url.path"] = path
        attributes["http.route"] = route
        attributes["http.request.body.size"] = body_size
        if model:
            attributes["mlserve.model"] = model
            if version:
                attributes["mlserve.model.version"] = version
        if client:
            attributes["client.address"] = client
        if server_address:
            attributes["server.address"] = server_address
    return span


def answered(span: tracing.Span, response: Response, request_id: str | None) -> None:
    """The response's status and size on its server span (``request_id``: the request's
    id once answered, else the response's ``x-request-id``)."""
    if not span.sampled:
        return
    tracing.set_status(span, response.status_code)
    if not isinstance(response.body, ChunkStream | dict | list):
        body = response.body
        span.attributes["http.response.body.size"] = len(body) if body else 0
    named = request_id or (response.headers or {}).get(REQUEST_ID_HEADER)
    if named:
        span.attributes["mlserve.request.id"] = named


async def traced(
    answer: Callable[[], Awaitable[Response]],
    method: str,
    path: str,
    headers: Mapping[str, str],
    body_size: int,
    client: str | None,
    server_address: str | None,
) -> Response:
    """``answer()`` inside the request's server span (a streamed answer's included: the
    faces write the stream before ``answer`` returns); a probe runs without one."""
    span = opened(method, path, headers, body_size, client, server_address)
    if span is None:
        return await answer()
    with span:
        response = await answer()
        answered(span, response, None)
        return response


def name_request(request_id: str) -> None:
    """Name the current server span's request (a face that knows its id only inside)."""
    opened = tracing.current()
    if opened is not None:
        opened.set_attribute("mlserve.request.id", request_id)
