"""``RepositoryRouter``: a ``ModelRouter`` whose routes come from a model repository.

Built from its description like any router (``class_args``: ``repository``,
``model_config``, ``poll_interval``, ``cache_size``, ``load_timeout``,
``version_quiet_period``, ``version_done_file``), so a repository function
exports and serves like any other; the last two, when not given, come from
``MLSERVE_VERSION_QUIET_PERIOD`` and ``MLSERVE_VERSION_DONE_FILE`` where it
serves. At ``post_init`` it syncs the repository once (loading what is
served), attaches it to the server as ``server.repository`` and starts the
watcher. Routes added by ``add_model`` stay served beside the repository's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from mlserve.graph.rollout import RolloutPolicy
from mlserve.graph.routers import ModelRouter
from mlserve.protocol.errors import ModelNotFound, ModelNotReady
from mlserve.repository.layout import check_done_file
from mlserve.repository.repository import ModelRepository, check_quiet_period
from mlserve.repository.watcher import RepositoryWatcher

__all__ = [
    "DEFAULT_QUIET_PERIOD",
    "DONE_FILE_ENV",
    "QUIET_PERIOD_ENV",
    "RepositoryRouter",
    "version_settings",
]

# docs/repository.md#hot-reload: how long a new version's files stay unchanged before it loads
DEFAULT_QUIET_PERIOD = 2.0
QUIET_PERIOD_ENV = "MLSERVE_VERSION_QUIET_PERIOD"
DONE_FILE_ENV = "MLSERVE_VERSION_DONE_FILE"


class RepositoryRouter(ModelRouter):
    """Routes ``m``, ``m:v`` and ``/v2/models/m[/versions/v]`` to a repository's versions."""

    requires_routes = False  # models come and go with the repository

    def __init__(
        self,
        repository: str | None = None,
        model_config: str | None = None,
        poll_interval: float = 1.0,
        cache_size: int | None = None,
        load_timeout: float = 300.0,
        version_quiet_period: float | None = None,
        version_done_file: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.static_routes = dict(self.routes)
        self.poll_interval = poll_interval
        self.watcher: RepositoryWatcher | None = None
        server = self.context.server
        quiet_period, done_file = version_settings(version_quiet_period, version_done_file)
        self.repository = ModelRepository(
            repository,
            self._set_table,
            config_file=model_config,
            context=self.context,
            namespace=getattr(server, "namespace", None),
            cache_size=cache_size,
            load_timeout=load_timeout,
            quiet_period=quiet_period,
            done_file=done_file,
        )

    def _set_table(self, table: dict[str, Any]) -> None:
        # One assignment: a request holds either the old table or the new one.
        self.routes = {**table, **self.static_routes}
        self.refresh_traffic()

    def declared_weights(self) -> dict[str, dict[str, float]]:
        """The weights of the configs' versions that are served
        (docs/graphs.md#rolling-out-a-new-model)."""
        routes, repository = self.routes, getattr(self, "repository", None)
        declared: dict[str, dict[str, float]] = {}
        configs = dict(repository.configs) if repository is not None else {}
        for name, config in configs.items():
            served = {f"{name}:{v}": w for v, w in config.weights.items()}
            served = {key: weight for key, weight in served.items() if key in routes}
            if served:
                declared[name] = served
        return declared

    def declared_policies(self) -> dict[str, RolloutPolicy]:
        """The rollout policies of the configs' versions that are served
        (docs/graphs.md#rolling-back-or-promoting-a-canary)."""
        routes, repository = self.routes, getattr(self, "repository", None)
        configs = dict(repository.configs) if repository is not None else {}
        return {
            f"{name}:{version}": policy
            for name, config in configs.items()
            for version, policy in config.rollout.items()
            if f"{name}:{version}" in routes
        }

    def post_init(self, mode: str = "sync") -> None:
        super().post_init(mode)
        self.repository.sync(stable_only=False)
        server = self.context.server
        if server is not None:
            server.repository = self.repository
            server.on_shutdown(self.close)
        if self.poll_interval and self.poll_interval > 0:
            self.watcher = RepositoryWatcher(self.repository, self.poll_interval)
            self.watcher.start()

    def close(self) -> None:
        """Stop polling (at server shutdown)."""
        if self.watcher is not None:
            self.watcher.stop()

    def iter_models(self) -> Iterator[Any]:
        seen: set[int] = set()
        for route in self.routes.values():
            for model in route.iter_models():
                if id(model) not in seen:
                    seen.add(id(model))
                    yield model

    def resolve_key(self, key: str, routes: dict[str, Any] | None = None) -> str:
        """As ``ModelRouter``'s; a repository model that failed to load (or is loading)
        answers 503 with the reason, not 404."""
        try:
            return super().resolve_key(key, routes)
        except ModelNotFound:
            reason = self.repository.unavailable(key)
            if reason is None:
                raise
            raise ModelNotReady(reason) from None

    def list_models(self) -> dict[str, Any]:
        """Versioned keys of the repository, and the static routes."""
        return {"models": [key for key in self.routes if ":" in key or key in self.static_routes]}

    def is_ready(self) -> bool:
        static = [m for route in self.static_routes.values() for m in route.iter_models()]
        return self.repository.is_ready() and all(model.ready for model in static)


def version_settings(
    quiet_period: float | None = None, done_file: str | None = None
) -> tuple[float, str | None]:
    """When a new version loads (docs/repository.md#a-version-loads-when-complete): the
    quiet period and done file given, else from the environment, else the defaults;
    ValueError says what is wrong with one."""
    if quiet_period is None:
        text = os.environ.get(QUIET_PERIOD_ENV, "").strip()
        try:
            quiet_period = float(text) if text else DEFAULT_QUIET_PERIOD
        except ValueError:
            raise ValueError(f"{QUIET_PERIOD_ENV}={text!r}: give a number of seconds") from None
    done_file = done_file or os.environ.get(DONE_FILE_ENV) or None
    return check_quiet_period(quiet_period), done_file and check_done_file(done_file)
