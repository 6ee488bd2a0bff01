"""The read side of endpoint records: ``GET /api/v1/projects/<p>/model-endpoints[/<uid>]``
(a server-level handler, so the mock server and HTTP answer alike) and the
table that ``mlserve endpoints list`` prints."""

from __future__ import annotations

from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only, suspends_for
from mlserve.monitoring.endpoints import EndpointRegistry, ModelEndpoint
from mlserve.protocol.errors import IllegalOperation, ModelNotFound

__all__ = ["endpoints_handler", "format_table", "list_endpoints"]

PREFIX = "/api/v1/projects/"


def endpoints_handler(registry: EndpointRegistry) -> Any:
    """A ``GraphServer.add_handler`` handler answering from ``registry``."""

    @answers_only(lambda method, path: path.startswith(PREFIX))
    @suspends_for(lambda event: (event.path or "").startswith(PREFIX))
    async def handler(server: object, event: Event) -> Response | None:
        path = event.path
        if not (path and path.startswith(PREFIX)):  # every other request: nothing more
            return None
        parts = _route(path)
        if parts is None:
            return None
        if event.method != "GET":
            raise IllegalOperation(f"model endpoints are read-only, {event.method} is not allowed")
        return await run_in_threadpool(_answer, registry, *parts)

    return handler


def _route(path: str) -> tuple[str, str] | None:
    if not path.startswith(PREFIX):
        return None
    parts = path[len(PREFIX) :].strip("/").split("/")
    if len(parts) not in (2, 3) or parts[1] != "model-endpoints":
        return None
    return parts[0], parts[2] if len(parts) == 3 else ""


def _answer(registry: EndpointRegistry, project: str, uid: str) -> Response:
    registry.flush()  # counters gathered since the last flush are part of the answer
    if not uid:
        return Response({"endpoints": [e.model_dump(mode="json") for e in registry.list(project)]})
    endpoint = registry.get(uid)
    if endpoint is None or endpoint.metadata.project != project:
        raise ModelNotFound(f"model endpoint {uid} not found in project {project}")
    return Response(endpoint.model_dump(mode="json"))


_COLUMNS = (
    "PROJECT",
    "MODEL",
    "TYPE",
    "FUNCTION",
    "CLASS",
    "REQUESTS",
    "ERRORS",
    "LAST REQUEST",
    "DRIFT",
    "UID",
)
_TYPES = {1: "node", 2: "router", 3: "leaf"}


def _row(endpoint: ModelEndpoint) -> tuple[str, ...]:
    status = endpoint.status
    last = (
        status.last_request.isoformat(sep=" ", timespec="seconds") if status.last_request else "-"
    )
    return (
        endpoint.metadata.project,
        endpoint.spec.model,
        _TYPES.get(int(status.endpoint_type), "?"),
        endpoint.spec.function_uri,
        endpoint.spec.model_class,
        str(status.metrics.get("requests", 0)),
        str(status.error_count),
        last,
        _drift(endpoint),
        endpoint.metadata.uid,
    )


def _drift(endpoint: ModelEndpoint) -> str:
    """The last window's drift status and value, ``-`` before the monitor measured one."""
    status = endpoint.status
    if not status.drift_status:
        return "-"
    general = status.drift_measures.get("general_drift")
    return f"{status.drift_status} ({general:.2f})" if general is not None else status.drift_status


def format_table(endpoints: list[ModelEndpoint]) -> str:
    """A plain-text table, one endpoint a line, columns aligned."""
    rows = [_COLUMNS, *(_row(endpoint) for endpoint in endpoints)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def list_endpoints(store_url: str | None, project: str | None) -> str:
    """What ``mlserve endpoints list`` prints."""
    from mlserve.monitoring.stores import open_store

    store = open_store(store_url)
    try:
        endpoints = store.list(project)
    finally:
        store.close()
    return format_table(endpoints) if endpoints else "no model endpoints"
