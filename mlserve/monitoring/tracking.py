"""Turning tracking on for a graph server: the model-log stream and endpoint records
(docs/monitoring.md#turning-it-on).

``GraphServer.init_object`` calls :func:`setup`. The stream is on when the
function called ``set_tracking()`` (or, outside the mock server, when
``track_models`` is set); endpoint records are on when ``track_models`` is
set. In the mock server ``track_models`` therefore governs endpoint records
only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from mlserve.monitoring.endpoints import EndpointRegistry, EndpointType, ModelEndpoint, Tally
from mlserve.monitoring.pusher import StreamPusher
from mlserve.monitoring.records import at_ns, ns_of

__all__ = ["ModelTracker", "setup", "stream_path"]

logger = logging.getLogger("mlserve.monitoring")

DEFAULT_STREAM_FILE = "model-logs.jsonl"
_UNSEEN: Any = object()  # a model whose tally was not looked up yet
PUSHER_OPTIONS = ("max_queue", "flush_after")


class ModelTracker:
    """A model's ``model_logger``: counts calls for the endpoint record, logs them to the stream."""

    def __init__(self, pusher: StreamPusher | None, registry: EndpointRegistry | None) -> None:
        self.pusher = pusher
        self.registry = registry
        # Each model's lock-free tally of successful calls; None: a model without a record.
        self._tallies: dict[int, Tally | None] = {}
        if pusher is not None and registry is None:  # nothing to count: one call less a request
            self.push = pusher.push  # type: ignore[method-assign]

    def push(
        self,
        model: object,
        start: datetime | int,
        request: object,
        response: object,
        op: str,
        microsec: int,
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """Count and log one successful call; ``start``: the model's ``time.time_ns()``
        reading, or a datetime from user code."""
        ns = start if type(start) is int else ns_of(start)
        tally = self._tallies.get(id(model), _UNSEEN)
        if tally is _UNSEEN:
            tally = self._tally(model, ns)
        if tally is not None:  # atomic steps (see Tally): no lock on the request path
            next(tally.calls)
            if ns > tally.last:  # calls come mostly in order: one comparison
                tally.last = ns
            elif ns < tally.first:
                tally.first = ns
        if self.pusher is not None:
            self.pusher.push(model, start, request, response, op, microsec, metrics)

    def push_error(
        self, model: object, start: datetime | int, request: object, op: str, exc: BaseException
    ) -> None:
        self._count(model, start, True)
        if self.pusher is not None:
            self.pusher.push_error(model, start, request, op, exc)

    def push_stream(
        self,
        model: object,
        start: datetime | int,
        request: object,
        response: object,
        op: str,
        microsec: int,
        stream: dict[str, Any],
    ) -> None:
        """Count and log one streamed call as it ends (``StreamPusher.push_stream``)."""
        self._count(model, start, "error" in stream)
        if self.pusher is not None:
            self.pusher.push_stream(model, start, request, response, op, microsec, stream)

    def _tally(self, model: object, ns: int) -> Tally | None:
        uid = getattr(model, "model_endpoint_uid", None)
        tally = self.registry.tally(uid, ns) if self.registry is not None and uid else None
        self._tallies[id(model)] = tally
        return tally

    def _count(self, model: object, start: datetime | int, error: bool) -> None:
        uid = getattr(model, "model_endpoint_uid", None)
        if self.registry is not None and uid:
            self.registry.count(uid, at_ns(ns_of(start)), error)

    def close(self) -> None:
        """Flush the stream and the request counters (at server shutdown)."""
        if self.pusher is not None:
            self.pusher.close()
        if self.registry is not None:
            self._tallies.clear()  # a later call asks the registry, which restarts its flusher
            self.registry.close()


def setup(server: Any) -> ModelTracker | None:
    """Start what ``server``'s tracking settings ask for; None when tracking is off."""
    tracking = server.tracking
    mock = bool(getattr(server.context, "is_mock", False))
    stream_on = bool(tracking.get("enable_tracking")) or (server.track_models and not mock)
    if not (stream_on or server.track_models):
        return None
    url = stream_path(server) if stream_on else ""
    pusher = _pusher(server, url) if stream_on else None
    registry = _registry(server, url) if server.track_models else None
    tracker = ModelTracker(pusher, registry)
    from mlserve.core.context import StreamContext

    server.context.stream = StreamContext(pusher, url, server.function_uri)
    for obj in [*server.iter_models(), *(step.object for step in _ensembles(server.graph))]:
        obj.model_logger = tracker
    server.on_shutdown(tracker.close)
    return tracker


def stream_path(server: Any) -> str:
    """``set_tracking(stream_path=)``, else parameter ``log_stream``, else the data dir's file."""
    from mlserve.monitoring.stores import data_dir

    chosen = server.tracking.get("stream_path") or server.parameters.get("log_stream")
    return str(chosen or data_dir(server.parameters) / DEFAULT_STREAM_FILE)


def _pusher(server: Any, url: str) -> StreamPusher:
    from mlserve.monitoring.streams import open_stream

    args = dict(server.tracking.get("stream_args") or {})
    options = {key: args.pop(key) for key in PUSHER_OPTIONS if key in args}
    parts = urlsplit(url)
    return StreamPusher(
        open_stream(url, **args),
        batch=server.tracking.get("batch") or 1,
        sample=server.tracking.get("sample") or 1,
        function_uri=server.function_uri,
        worker=server.context.worker_id,
        verbose=server.verbose,
        name=f"{parts.scheme}://{parts.hostname or ''}{parts.path}" if parts.scheme else url,
        **options,
    )


# ---- endpoint records ----------------------------------------------------------------


def _registry(server: Any, url: str) -> EndpointRegistry:
    from mlserve.monitoring.api import endpoints_handler
    from mlserve.monitoring.stores import default_store_url, open_store

    flush_every = float(server.parameters.get("endpoint_flush_seconds", 5.0))
    registry = EndpointRegistry(open_store(default_store_url(server.parameters)), flush_every)
    try:
        _register_all(server, registry, url)
    except Exception:  # a store that is down must not stop the models from serving
        logger.exception("endpoint records: registering the models failed")
    registry.watch_shadows(partial(_shadow_totals, server))
    server.add_handler(endpoints_handler(registry))
    return registry


def _register_all(server: Any, registry: EndpointRegistry, url: str) -> None:
    leaves: set[int] = set()
    for step in _ensembles(server.graph):
        children = list(step.iter_models())
        leaves.update(id(child) for child in children)
        uids = [
            _register(server, registry, child, url, EndpointType.LEAF).metadata.uid
            for child in children
        ]
        _register(
            server,
            registry,
            step.object,
            url,
            EndpointType.ROUTER,
            [child.name for child in children],
            uids,
        )
    for model in server.iter_models():
        if id(model) not in leaves:
            _register(server, registry, model, url, EndpointType.NODE)


def _shadow_totals(server: Any) -> dict[str, dict[str, int]]:
    """Each shadow's agreement counts in this process, by its model's uid."""
    totals: dict[str, dict[str, int]] = {}
    for step in _steps(server.graph):
        runners = getattr(getattr(step, "object", None), "shadow_runners", None)
        for key, runner in (runners() if callable(runners) else {}).items():
            route = step.object.route_of(key)
            for model in route.iter_models() if route is not None else ():
                uid = getattr(model, "model_endpoint_uid", None)
                if uid:
                    total = totals.setdefault(uid, {})
                    for name, count in runner.counts.to_dict().items():
                        total[name] = total.get(name, 0) + count
    return totals


def _register(
    server: Any,
    registry: EndpointRegistry,
    obj: Any,
    url: str,
    kind: EndpointType,
    children: list[str] | None = None,
    children_uids: list[str] | None = None,
) -> ModelEndpoint:
    from mlserve.monitoring.endpoints import endpoint_uid

    name, version = str(obj.name or ""), str(getattr(obj, "version", "") or "")
    uid = endpoint_uid(server.project, server.function_name, server.function_tag, name, version)
    reference = _reference(obj)
    endpoint = ModelEndpoint.model_validate(
        {
            "metadata": {
                "project": server.project,
                "uid": uid,
                "labels": dict(getattr(obj, "labels", None) or {}),
            },
            "spec": {
                "function_uri": server.function_uri,
                "model": f"{name}:{version or 'latest'}",
                "model_class": type(obj).__name__,
                "model_uri": str(getattr(obj, "model_path", None) or ""),
                "stream_path": url,
                "feature_names": _feature_names(_names(getattr(obj, "inputs", None)), reference),
                "label_names": _names(getattr(obj, "outputs", None)),
                "feature_stats": reference,
                "monitoring_mode": "enabled" if url else "disabled",
            },
            "status": {
                "endpoint_type": kind,
                "children": children or [],
                "children_uids": children_uids or [],
            },
        }
    )
    registry.register(endpoint)
    obj.model_endpoint_uid = uid
    return endpoint


def _reference(obj: Any) -> dict[str, Any]:
    """The model's training statistics: ``add_model(..., feature_stats=)`` (a dict of
    ``feature_stats()``, or a DataFrame to compute it from), else a ``feature_stats.json``
    beside the model file (docs/monitoring.md#reference-statistics)."""
    from mlserve.monitoring.statistics import feature_stats, load_feature_stats

    get_param = getattr(obj, "get_param", None)
    given = get_param("feature_stats") if callable(get_param) else None
    if given is None:
        given = getattr(obj, "feature_stats", None)
    if given is None and getattr(obj, "model_path", None):
        given = load_feature_stats(str(obj.model_path))
    if given is None:
        return {}
    return given if isinstance(given, dict) else feature_stats(given)


def _feature_names(declared: list[str], reference: dict[str, Any]) -> list[str]:
    """The names of the input columns: the declared inputs' when there is one per feature
    of the reference (else they name tensors, e.g. one matrix), else the reference's."""
    if reference and len(declared) != len(reference):
        return list(reference)
    return declared


def _names(tensors: Any) -> list[str]:
    """The names of declared tensors (``[{"name", "datatype", "shape"}]``)."""
    return [str(t["name"]) for t in tensors or [] if isinstance(t, dict) and t.get("name")]


def _ensembles(step: object) -> Iterator[Any]:
    """Router steps whose object is an ensemble, anywhere in the graph."""
    for found in _steps(step):
        if getattr(found, "routes", None) and _is_ensemble(getattr(found, "object", None)):
            yield found


def _steps(step: object) -> Iterator[Any]:
    """Every step of the graph, and the routes of its routers."""
    if step is None:
        return
    yield step
    routes = getattr(step, "routes", None)
    children = list(routes.values()) if isinstance(routes, dict) else []
    steps = getattr(step, "steps", None)
    if isinstance(steps, dict):
        children += list(steps.values())
    for child in children:
        yield from _steps(child)


def _is_ensemble(obj: object) -> bool:
    """An ``is_ensemble`` attribute decides; else any router that is not a plain ``ModelRouter``."""
    if obj is None:
        return False
    flag = getattr(obj, "is_ensemble", None)
    if flag is not None:
        return bool(flag)
    from mlserve.graph.routers import BaseModelRouter, ModelRouter

    return type(obj) not in (ModelRouter, BaseModelRouter)
