"""``ModelRepository``: the versions on disk, made routes of a router (docs/repository.md).

``sync()`` brings what is served in line with the disk and the config: new
versions in the policy are loaded (their class's ``load()`` warms them up)
and only then published; versions leaving the policy are unpublished and
unload once their requests in flight finish. Publishing swaps in a new route
table (copy-on-write), where the unversioned name ``m`` is an alias of the
highest served version, so a request never sees a half-changed table.

The repository extension (``index``, ``load``, ``unload``) and the label
lookup of the TF Serving API (``resolve_label``) are its public face.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.context import GraphContext
from mlserve.graph.steps import construct, resolve_class
from mlserve.protocol.errors import ModelNotFound, ModelNotReady
from mlserve.repository.cache import ModelCache
from mlserve.repository.config import ModelConfig, default_configs, load_config
from mlserve.repository.layout import fingerprint, scan_models, scan_versions
from mlserve.repository.routes import LOADING, UNAVAILABLE, VersionRoute

__all__ = ["ModelRepository"]

logger = logging.getLogger("mlserve.repository")

Key = tuple[str, int]


class ModelRepository:
    """Serves the models of ``root`` (and/or ``config_file``) through ``publish(table)``."""

    def __init__(
        self,
        root: str | Path | None,
        publish: Callable[[dict[str, Any]], None],
        config_file: str | Path | None = None,
        context: GraphContext | None = None,
        namespace: dict[str, Any] | None = None,
        cache_size: int | None = None,
        load_timeout: float = 300.0,
    ) -> None:
        if root is None and config_file is None:
            raise ValueError("a model repository needs a folder or a model config file")
        self.root = Path(root).resolve() if root is not None else None
        self.config_file = Path(config_file).resolve() if config_file is not None else None
        self.context = context or GraphContext()
        self.namespace = namespace or {}
        self.cache = ModelCache(cache_size) if cache_size else None
        self.load_timeout = load_timeout
        self.configs: dict[str, ModelConfig] = {}
        self.served: dict[Key, VersionRoute] = {}
        self.retiring: dict[Key, VersionRoute] = {}
        self.failed: dict[Key, tuple[Any, str]] = {}
        self.loading: set[Key] = set()
        self.added: dict[str, ModelConfig] = {}  # loaded on request, beyond the config
        self.unloaded: set[str] = set()  # unloaded on request: left alone until loaded again
        self.synced = False
        self._publish = publish
        self._seen: dict[Key, Any] = {}
        self._config_stamp: Any = None
        self._file_configs: dict[str, ModelConfig] = {}
        self._replaced: dict[str, ModelConfig] | None = None  # by replace_config
        self._lock = threading.RLock()

    # ---- reconciling with the disk --------------------------------------------

    def sync(self, stable_only: bool = True) -> None:
        """Load, publish and retire versions to match the disk and the config.

        ``stable_only`` (the watcher) loads a new version only once its folder
        is unchanged since the previous sync.
        """
        with self._lock:
            self.configs = {**self._read_configs(), **self.added}
            for name, config in self.configs.items():
                if name not in self.unloaded:
                    self._sync_model(config, stable_only)
            for name in {m for m, _ in self.served} - set(self.configs):
                self._retire([key for key in self.served if key[0] == name])
            self.synced = True

    def _read_configs(self) -> dict[str, ModelConfig]:
        """The configured models; a config file is read again only when it changed,
        and a broken one keeps the previous configuration."""
        if self._replaced is not None:
            return dict(self._replaced)
        if self.config_file is None:
            return default_configs(self.root)  # type: ignore[arg-type]
        try:
            stat = self.config_file.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._config_stamp:
                configs = load_config(self.config_file, self.root)
                self._config_stamp = stamp
                self._file_configs = configs
        except Exception:
            if self._config_stamp is None:
                raise
            logger.exception(
                "model config %s is invalid; keeping the previous one", self.config_file
            )
        return dict(self._file_configs)

    def _sync_model(self, config: ModelConfig, stable_only: bool) -> None:
        name = config.name
        current = {v for m, v in self.served if m == name}
        on_disk = scan_versions(config.base_path)
        verdicts = {
            v: v in current or self._loadable((name, v), path, stable_only)
            for v, path in on_disk.items()
        }
        available = {v: on_disk[v] for v, ok in verdicts.items() if ok is True}
        wanted = config.version_policy.select(available)
        loaded_all = True
        for version in wanted:
            if version not in current:
                loaded_all &= self._add_version(config, version, available[version])
        leaving = [(name, v) for v in current if v not in wanted]
        # Availability first: the old versions serve until the new ones do, or
        # (nothing wanted) until no version on disk is still being written.
        if leaving and loaded_all and (wanted or "unstable" not in verdicts.values()):
            self._retire(leaving)
        self._forget_missing(name, on_disk)

    def _loadable(self, key: Key, path: Path, stable_only: bool) -> bool | str:
        """A version not served yet may load (True): not failed as it is ("failed"),
        and, for the watcher, unchanged since the previous sync ("unstable")."""
        prints = fingerprint(path)
        if key in self.failed and self.failed[key][0] == prints:
            return "failed"
        previous, self._seen[key] = self._seen.get(key), prints
        if not stable_only or (prints and previous == prints):
            return True
        return "unstable"

    def _forget_missing(self, name: str, on_disk: dict[int, Path]) -> None:
        for table in (self._seen, self.failed):
            for key in [k for k in table if k[0] == name and k[1] not in on_disk]:
                del table[key]

    def _add_version(self, config: ModelConfig, version: int, path: Path) -> bool:
        """Publish a version, loaded first unless the cache loads it on use."""
        key = (config.name, version)
        route = self._loaded_route(config, version, path, self.failed)
        if route is None:
            return False
        self.failed.pop(key, None)
        self.served[key] = route
        self.publish()
        logger.info("serving model %s version %s", config.name, version)
        return True

    def _loaded_route(
        self,
        config: ModelConfig,
        version: int,
        path: Path,
        failures: dict[Key, tuple[Any, str]],
    ) -> VersionRoute | None:
        """A version's route, loaded unless the cache loads it on use; None when its load
        fails, the failure noted in ``failures`` (with the folder's fingerprint)."""
        key = (config.name, version)
        route = self._route(config, version, path)
        if self.cache is None:
            self.loading.add(key)
            try:
                route.load()
            except ModelNotReady:
                failures[key] = (fingerprint(path), route.error)
                return None
            finally:
                self.loading.discard(key)
        return route

    def _route(self, config: ModelConfig, version: int, path: Path) -> VersionRoute:
        key = f"{config.name}:{version}"
        cache = self.cache

        def build() -> Any:
            return self._build_model(config, key, path)

        if cache is None:
            return VersionRoute(key, build, self.load_timeout, on_unload=self._unloaded)

        def unloaded(route: VersionRoute) -> None:
            cache.unloaded(route)
            self._unloaded(route)

        return VersionRoute(
            key,
            build,
            self.load_timeout,
            on_load=cache.loaded,
            on_use=cache.used,
            on_unload=unloaded,
        )

    def _build_model(self, config: ModelConfig, key: str, path: Path) -> Any:
        cls = resolve_class(config.class_for(path), self.namespace)
        args = {**config.class_args, "model_path": str(path)}
        model = construct(cls, args, context=self.context, name=key)
        model.post_init("sync")
        if not getattr(model, "ready", True):
            raise RuntimeError(getattr(model, "error", "") or "the model is not ready after load")
        served = {v for m, v in dict(self.served) if m == config.name} | {
            int(key.partition(":")[2])
        }
        model.versions = [str(v) for v in sorted(served)]
        return model

    def _retire(self, keys: list[Key]) -> None:
        routes = [self.served.pop(key) for key in keys]
        for key, route in zip(keys, routes, strict=True):
            self.retiring[key] = route
        self.publish()
        for route in routes:
            logger.info("retiring model %s (%d requests in flight)", route.key, route.inflight)
            route.retire()

    def _unloaded(self, route: VersionRoute) -> None:
        name, _, version = route.key.partition(":")
        key = (name, int(version))
        if self.retiring.get(key) is route:
            del self.retiring[key]

    def publish(self) -> None:
        """Swap in the route table: ``m:v`` for every served version, ``m`` for the highest."""
        table: dict[str, Any] = {}
        versions: dict[str, list[str]] = {}
        for (name, version), route in sorted(self.served.items()):
            table[f"{name}:{version}"] = route
            table[name] = route  # sorted: the last one written is the highest version
            versions.setdefault(name, []).append(str(version))
        self._publish(table)
        for route in self.served.values():
            if route.model is not None:
                route.model.versions = versions[route.key.partition(":")[0]]

    # ---- the repository extension ------------------------------------------------

    def index(self) -> list[dict[str, Any]]:
        """Every version known on disk or in memory: ``[{name, version, state, reason}]``."""
        entries = []
        known = [
            *dict(self.served),
            *dict(self.retiring),
        ]  # copies: the watcher may be changing them
        for name, config in sorted(dict(self.configs).items()):
            on_disk = scan_versions(config.base_path)
            keys = {(name, v) for v in on_disk} | {k for k in known if k[0] == name}
            for key in sorted(keys):
                state, reason = self._state(key)
                entries.append(
                    {"name": name, "version": str(key[1]), "state": state, "reason": reason}
                )
        return entries

    def _state(self, key: Key) -> tuple[str, str]:
        if key in self.loading:
            return LOADING, ""
        route = self.served.get(key)
        if route is not None:
            if route.error:
                return UNAVAILABLE, route.error
            if route.model is None and route.state != LOADING:
                return UNAVAILABLE, "not in memory: loads on its first request"
            return route.state, ""
        if key in self.retiring:
            return UNAVAILABLE, "unloading"
        if key in self.failed:
            return UNAVAILABLE, self.failed[key][1]
        if key[0] in self.unloaded:
            return UNAVAILABLE, "unloaded"
        return UNAVAILABLE, "not in the version policy"

    async def load(self, name: str) -> None:
        """Load (or reload) a model's versions now, beyond polling; raises if none serves."""
        await run_in_threadpool(self.load_model, name)

    async def unload(self, name: str) -> None:
        """Unload every version of a model (each after its requests in flight)."""
        await run_in_threadpool(self.unload_model, name)

    def load_model(self, name: str) -> None:
        with self._lock:
            config = self.configs.get(name) or self._found_on_disk(name)
            self.unloaded.discard(name)
            for key in [k for k in self.failed if k[0] == name]:
                del self.failed[key]
            self._sync_model(config, stable_only=False)
            if not any(m == name for m, _ in self.served):
                errors = "; ".join(reason for k, (_, reason) in self.failed.items() if k[0] == name)
                raise ModelNotReady(
                    f"model {name} failed to load: {errors or 'no version on disk'}"
                )

    def _found_on_disk(self, name: str) -> ModelConfig:
        """A model folder not in the config, loaded on request from then on."""
        found = scan_models(self.root).get(name) if self.root is not None else None
        if found is None:
            raise ModelNotFound(f"model {name} is not in the repository")
        self.added[name] = self.configs[name] = ModelConfig(name, found)
        return self.added[name]

    def unload_model(self, name: str) -> None:
        with self._lock:
            if name not in self.configs:
                raise ModelNotFound(f"model {name} is not in the repository")
            self.unloaded.add(name)
            self._retire([key for key in self.served if key[0] == name])

    def replace_config(self, configs: dict[str, ModelConfig]) -> None:
        """Serve exactly ``configs`` from now on (TF Serving's config reload), all or
        nothing: the versions the new config wants that are not served yet load first,
        unpublished. When a configured model would serve no version, those loads are
        undone and this raises with nothing changed: the running config and its models
        keep serving. Otherwise the new versions are published in one swap, then the
        versions and models the new config leaves out retire; the files' config is no
        longer read."""
        with self._lock:
            fresh: dict[Key, VersionRoute] = {}
            failures: dict[Key, tuple[Any, str]] = {}
            keep: set[Key] = set()
            scanned: dict[str, dict[int, Path]] = {}
            try:
                for config in configs.values():
                    scanned[config.name] = self._prepare(config, fresh, failures, keep)
            except BaseException:
                self._discard(fresh)
                raise
            missing = sorted(name for name in configs if not any(m == name for m, _ in keep))
            if missing:
                self._discard(fresh)
                errors = "; ".join(
                    f"{k[0]} version {k[1]}: {reason}"
                    for k, (_, reason) in failures.items()
                    if k[0] in missing
                )
                raise ModelNotReady(
                    f"models {missing} serve no version: {errors or 'no version on disk'}; "
                    "the running config is unchanged"
                )
            self._replaced = dict(configs)
            self.configs = dict(configs)
            self.added.clear()
            self.unloaded.clear()
            for key in [k for k in self.failed if k[0] in configs]:
                del self.failed[key]
            self.failed.update(failures)
            self.served.update(fresh)
            leaving = [key for key in self.served if key not in keep]
            if leaving:
                self._retire(leaving)  # publishes the new versions and the leaving ones at once
            else:
                self.publish()
            for name, version in sorted(fresh):
                logger.info("serving model %s version %s", name, version)
            for name, on_disk in scanned.items():
                self._forget_missing(name, on_disk)
            self.synced = True

    def _prepare(
        self,
        config: ModelConfig,
        fresh: dict[Key, VersionRoute],
        failures: dict[Key, tuple[Any, str]],
        keep: set[Key],
    ) -> dict[int, Path]:
        """One model of a new config, made ready without publishing anything: the
        wanted versions not served yet load into ``fresh`` (or into ``failures``), and
        the versions it serves once switched go into ``keep``. As ``sync``: served
        versions the policy leaves out stay only while a wanted one failed to load."""
        name = config.name
        current = {(name, v) for m, v in self.served if m == name}
        on_disk = scan_versions(config.base_path)
        wanted = config.version_policy.select(on_disk)
        loaded_all = True
        for version in wanted:
            key = (name, version)
            if key in current:
                keep.add(key)
                continue
            route = self._loaded_route(config, version, on_disk[version], failures)
            if route is None:
                loaded_all = False
                continue
            fresh[key] = route
            keep.add(key)
        if not loaded_all:
            keep |= current  # availability first, as sync: the old versions serve on
        return on_disk

    def _discard(self, routes: dict[Key, VersionRoute]) -> None:
        """Unload versions loaded for a config that is not switched to (never published)."""
        for route in routes.values():
            route.retire()

    def resolve_label(self, model: str, label: str) -> str:
        """The version a label names (TF Serving's ``/labels/<l>``); it must be served."""
        config = self.configs.get(model)
        if config is None:
            raise ModelNotFound(f"model {model} is not in the repository")
        if label not in config.labels:
            raise ModelNotFound(f"model {model} has no version label '{label}'")
        version = config.labels[label]
        if (model, version) not in self.served:
            raise ModelNotReady(
                f"version {version} (label '{label}') of model {model} is not available"
            )
        return str(version)

    def is_ready(self) -> bool:
        """Synced once, and every configured model serves a version."""
        served = {m for m, _ in self.served}
        return self.synced and all(
            name in served for name in self.configs if name not in self.unloaded
        )
