"""The model-repository extension over the graph's own routers
(docs/repository.md#the-repository-extension).

``server.repository`` answers ``POST /v2/repository/index`` and
``/v2/repository/models/<m>/load|unload`` through three methods; an on-disk
versioned repository plugs in by implementing the same three::

    index() -> list[{"name", "version", "state", "reason"}]
    async load(name, overrides=None)  (re)load every version of ``name``, with a load's
                          config overrides as parameters; unknown name: ModelNotFound
    async unload(name)    take every version of ``name`` out of service

As in KServe, an unloaded model is gone from the routers: requests for it
answer 404 until it is loaded again. The index keeps listing it, with state
``UNAVAILABLE`` and reason ``unloaded`` (as Triton does).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.hidden import hidden
from mlserve.protocol.errors import InvalidInput, ModelNotFound, ModelNotReady
from mlserve.server.serving import ModelRepository, Serving

__all__ = ["GraphRepository", "ModelRepository", "find_routers"]

READY, UNAVAILABLE, LOADING = "READY", "UNAVAILABLE", "LOADING"


def find_routers(step: object) -> Iterator[Any]:
    """Every router step (a step with ``routes``) in the graph, depth first."""
    if step is None:
        return
    routes = getattr(step, "routes", None)
    if isinstance(routes, dict):
        yield step
        for route in routes.values():
            yield from find_routers(route)
    for child in (getattr(step, "steps", None) or {}).values():
        yield from find_routers(child)


def _model_of(route: Any) -> Any:
    return next(iter(route.iter_models()), None)


def _state(model: object, hide: bool) -> tuple[str, str]:
    """A model's state and reason; a failed load's text hidden when ``hide``
    (docs/security.md#errors-without-leaks)."""
    if model is None:
        return UNAVAILABLE, "not a model"
    if getattr(model, "ready", False):
        return READY, ""
    error = getattr(model, "error", "")
    if not error:
        return LOADING, ""
    return UNAVAILABLE, hidden(error) if hide else error


class GraphRepository:
    """Load and unload the routes of the graph's routers by model name."""

    def __init__(self, server: Serving) -> None:
        self.server = server
        # route key -> (router step, route step) of the unloaded routes
        self._unloaded: dict[str, tuple[Any, Any]] = {}
        # route key -> its own class_args, while a load's config overrides them
        self._configured: dict[str, dict[str, Any]] = {}

    def _routes(self) -> Iterator[tuple[Any, str, Any]]:
        for router in find_routers(self.server.graph):
            for key, route in router.routes.items():
                yield router, key, route

    def index(self) -> list[dict[str, Any]]:
        entries = []
        for _, key, route in self._routes():
            state, reason = _state(_model_of(route), self.server.hide_errors)
            entries.append(_entry(key, state, reason))
        entries += [_entry(key, UNAVAILABLE, "unloaded") for key in self._unloaded]
        return sorted(entries, key=lambda e: (e["name"], e["version"]))

    def _matching(self, name: str, op: str) -> list[tuple[Any, str, Any]]:
        loaded = [(r, k, s) for r, k, s in self._routes() if _matches(k, name)]
        unloaded = [(r, k, s) for k, (r, s) in self._unloaded.items() if _matches(k, name)]
        if not loaded and not unloaded:  # Triton's words: docs/protocol.md#errors
            raise ModelNotFound(f"failed to {op} '{name}': no such model in the repository")
        return loaded + unloaded

    async def load(self, name: str, overrides: dict[str, Any] | None = None) -> None:
        """Build and load every version of ``name`` afresh, then serve it. A version
        whose ``load()`` fails raises with the reason (docs/repository.md#the-repository-extension):
        the version that served before serves on, and one that was unloaded is
        served unready (503 with the reason). ``overrides`` (parameters of a load's
        config) apply on top of the model's own arguments until a load without them
        (docs/repository.md#loading-with-a-config-override)."""
        server = self.server
        failures = []
        matching = self._matching(name, "load")
        if overrides and any(not hasattr(route, "class_args") for _, _, route in matching):
            raise InvalidInput(f"failed to load '{name}': it is not a model step to configure")
        for router, key, route in matching:
            configured = self._configured.get(key, getattr(route, "class_args", {}))
            changed = bool(overrides) or key in self._configured
            args = {**configured, **(overrides or {})} if changed else None
            try:
                fresh = await run_in_threadpool(
                    _reloaded, route, server.context, getattr(server, "namespace", {}), args
                )
            except ValueError as exc:
                raise InvalidInput(f"failed to load '{name}': {exc}") from None
            model = _model_of(fresh)
            if model is not None and not getattr(model, "ready", True):
                failures.append(f"{key}: {getattr(model, 'error', '') or 'not ready'}")
                if key not in self._unloaded:
                    continue
            self._unloaded.pop(key, None)
            if overrides:
                self._configured.setdefault(key, configured)
            else:
                self._configured.pop(key, None)
            router.routes[key] = fresh
            router.object.post_init("sync")
        _graph_changed(server)
        if failures:
            raise ModelNotReady(f"failed to load '{name}', {'; '.join(failures)}")

    async def unload(self, name: str) -> None:
        """Take every version of ``name`` out of the routers (requests get 404)."""
        for router, key, route in self._matching(name, "unload"):
            if key in self._unloaded:
                continue
            del router.routes[key]
            self._unloaded[key] = (router, route)
            model = _model_of(route)
            if model is not None and hasattr(model, "ready"):
                model.ready = False
        _graph_changed(self.server)


def _reloaded(route: Any, context: Any, namespace: Any, args: dict[str, Any] | None) -> Any:
    """The route built afresh: with ``args`` as its class_args when given."""
    if args is None:
        return route.reloaded(context, namespace)
    return route.reloaded(context, namespace, args)


def _graph_changed(server: Serving) -> None:
    """Tell the server its routes changed (whether it can answer inline is asked again)."""
    changed = getattr(server, "graph_changed", None)
    if changed is not None:
        changed()


def _matches(key: str, name: str) -> bool:
    return key == name or key.partition(":")[0] == name


def _entry(key: str, state: str, reason: str) -> dict[str, Any]:
    name, _, version = key.partition(":")
    return {"name": name, "version": version, "state": state, "reason": reason}
