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
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from mlserve.core.aio import run_in_threadpool
from mlserve.core.context import GraphContext
from mlserve.core.hidden import hidden
from mlserve.core.loads import as_loaded
from mlserve.graph.steps import construct, resolve_class
from mlserve.protocol.errors import ModelNotFound, ModelNotReady
from mlserve.repository.cache import ModelCache
from mlserve.repository.config import ModelConfig, default_configs, load_config
from mlserve.repository.layout import (
    check_done_file,
    fingerprint,
    incomplete,
    scan_models,
    scan_versions,
)
from mlserve.repository.routes import LOADING, UNAVAILABLE, LoadFailed, VersionRoute

__all__ = ["ModelRepository", "check_quiet_period"]

logger = logging.getLogger("mlserve.repository")

Key = tuple[str, int]
Failure = tuple[Any, str]  # a failed load: the folder's fingerprint, the reason
WAITING = ("unstable", "incomplete")  # verdicts of a version on disk still being written


def check_quiet_period(seconds: float) -> float:
    """``seconds`` if it is a quiet period: how long a new version's files stay unchanged
    before the watcher loads it (docs/repository.md#a-version-loads-when-complete)."""
    if not 0 <= seconds < math.inf:
        raise ValueError(f"the version quiet period is 0 or more seconds, got {seconds}")
    return float(seconds)


@dataclass
class _Plan:
    """One model in a sync: the versions it serves, holds on disk and wants served."""

    config: ModelConfig
    on_disk: dict[int, Path]
    current: set[int]
    wanted: list[int]
    unstable: bool  # a version on disk is still being written (or lacks a file)
    loaded_all: bool = True

    @property
    def missing(self) -> list[int]:
        return [v for v in self.wanted if v not in self.current]


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
        quiet_period: float = 2.0,
        done_file: str | None = None,
    ) -> None:
        if root is None and config_file is None:
            raise ValueError("a model repository needs a folder or a model config file")
        self.root = Path(root).resolve() if root is not None else None
        self.config_file = Path(config_file).resolve() if config_file is not None else None
        self.context = context or GraphContext()
        self.namespace = namespace or {}
        self.cache = ModelCache(cache_size) if cache_size else None
        self.load_timeout = load_timeout
        self.quiet_period = check_quiet_period(quiet_period)
        self.done_file = check_done_file(done_file) if done_file is not None else None
        self.configs: dict[str, ModelConfig] = {}
        self.served: dict[Key, VersionRoute] = {}
        self.retiring: dict[Key, VersionRoute] = {}
        self.failed: dict[Key, Failure] = {}
        self.loading: set[Key] = set()
        self.waiting: dict[Key, str] = {}  # a version on disk not loaded yet: what it waits for
        self.added: dict[str, ModelConfig] = {}  # loaded on request, beyond the config
        self.unloaded: set[str] = set()  # unloaded on request: left alone until loaded again
        self.overrides: dict[str, dict[str, Any]] = {}  # a load's config, until a load without
        self.synced = False
        self._publish = publish
        self._seen: dict[Key, tuple[Any, float]] = {}  # a fingerprint, since when unchanged
        self._config_stamp: Any = None
        self._file_configs: dict[str, ModelConfig] = {}
        self._replaced: dict[str, ModelConfig] | None = None  # by replace_config
        self._lock = threading.RLock()

    # ---- reconciling with the disk --------------------------------------------

    def sync(self, stable_only: bool = True) -> None:
        """Load, publish and retire versions to match the disk and the config.

        ``stable_only`` (the watcher) loads a new version only once its folder
        has been unchanged for ``quiet_period`` seconds (at two syncs at least);
        otherwise (start-up, a load on request) the versions on disk are taken as
        written. Either way a version lacking a file (``incomplete``) waits.
        """
        with self._lock:
            self.configs = {**self._read_configs(), **self.added}
            served = [
                self._overridden(c) for name, c in self.configs.items() if name not in self.unloaded
            ]
            self._sync_models(served, stable_only)
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

    def _sync_models(self, configs: list[ModelConfig], stable_only: bool) -> None:
        """Bring models in line with their folders: the versions to load load side by
        side (docs/serving.md#start-up-loading-the-models), each published once loaded;
        then the versions leaving a model's policy retire."""
        plans = [self._plan(config, stable_only) for config in configs]
        jobs = [(plan, version) for plan in plans for version in plan.missing]
        loads = [partial(self._load_version, p.config, v, p.on_disk[v]) for p, v in jobs]
        for index, route in as_loaded(loads):
            plan, version = jobs[index]
            key = (plan.config.name, version)
            if not isinstance(route, VersionRoute):
                self.failed[key] = route
                plan.loaded_all = False
                continue
            self.failed.pop(key, None)
            self.served[key] = route
            self.publish()
            logger.info("serving model %s version %s", *key)
        for plan in plans:
            name = plan.config.name
            leaving = [(name, v) for v in plan.current if v not in plan.wanted]
            # Availability first: the old versions serve until the new ones do, or
            # (nothing wanted) until no version on disk is still being written.
            if leaving and plan.loaded_all and (plan.wanted or not plan.unstable):
                self._retire(leaving)
            self._forget_missing(name, plan.on_disk)

    def _plan(self, config: ModelConfig, stable_only: bool) -> _Plan:
        """What one model serves, holds on disk, and wants served."""
        name = config.name
        current = {v for m, v in self.served if m == name}
        on_disk = scan_versions(config.base_path)
        verdicts = {
            v: v in current or self._loadable(config, v, path, stable_only)
            for v, path in on_disk.items()
        }
        wanted = config.version_policy.select(v for v, ok in verdicts.items() if ok is True)
        unstable = any(ok in WAITING for ok in verdicts.values())
        return _Plan(config, on_disk, current, wanted, unstable)

    def _loadable(
        self, config: ModelConfig, version: int, path: Path, stable_only: bool
    ) -> bool | str:
        """A version not served yet may load (True): not failed as it is ("failed"),
        not lacking a file ("incomplete"), and, for the watcher, unchanged for the
        quiet period ("unstable"; docs/repository.md#hot-reload)."""
        key = (config.name, version)
        prints, now = fingerprint(path), time.monotonic()
        previous = self._seen.get(key)
        if previous is not None and previous[0] == prints:
            since, unchanged = previous[1], True
        else:  # new or changed; one found at start-up is taken as written long ago
            since, unchanged = (now if stable_only else -math.inf), False
        self._seen[key] = (prints, since)
        self.waiting.pop(key, None)
        if key in self.failed and self.failed[key][0] == prints:
            return "failed"
        lacking = incomplete(path, config.done_file or self.done_file)
        if lacking is not None:
            self.waiting[key] = f"incomplete: waiting for {lacking}"
            return "incomplete"
        if not stable_only or (prints and unchanged and now - since >= self.quiet_period):
            return True
        self.waiting[key] = f"being written: loads once unchanged for {self.quiet_period:g} s"
        return "unstable"

    def _forget_missing(self, name: str, on_disk: dict[int, Path]) -> None:
        for table in (self._seen, self.failed, self.waiting):
            for key in [k for k in table if k[0] == name and k[1] not in on_disk]:
                del table[key]

    def _load_version(
        self, config: ModelConfig, version: int, path: Path
    ) -> VersionRoute | Failure:
        """A version's route, loaded unless the cache loads it on use (in a loading
        thread: the caller records the outcome); ``(the folder's fingerprint, the
        reason)`` when its load fails."""
        key = (config.name, version)
        route = self._route(config, version, path)
        if self.cache is not None:
            return route
        self.loading.add(key)
        try:
            route.load()
        except ModelNotReady:
            return fingerprint(path), route.error
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
        model.post_init("sync")  # now, in this loading thread
        if not getattr(model, "ready", True):
            raise LoadFailed(getattr(model, "error", "") or "the model is not ready after load")
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
                return UNAVAILABLE, self._shown(route.error)
            if route.model is None and route.state != LOADING:
                return UNAVAILABLE, "not in memory: loads on its first request"
            return route.state, ""
        if key in self.retiring:
            return UNAVAILABLE, "unloading"
        waiting = self.waiting.get(key)  # once: the watcher may be changing it
        if waiting:
            return UNAVAILABLE, waiting
        if key in self.failed:
            return UNAVAILABLE, self._shown(self.failed[key][1])
        if key[0] in self.unloaded:
            return UNAVAILABLE, "unloaded"
        return UNAVAILABLE, "not in the version policy"

    def _shown(self, reason: str) -> str:
        """A failed load's reason as the index shows it: hidden when the server hides
        error text (docs/security.md#errors-without-leaks)."""
        return hidden(reason) if getattr(self.context.server, "hide_errors", False) else reason

    async def load(self, name: str, overrides: dict[str, Any] | None = None) -> None:
        """Load (or reload) a model's versions now, beyond polling; raises with the reason
        when a version fails to load or none is on disk. ``overrides``: see ``load_model``."""
        await run_in_threadpool(self.load_model, name, overrides)

    async def unload(self, name: str) -> None:
        """Unload every version of a model (each after its requests in flight)."""
        await run_in_threadpool(self.unload_model, name)

    def load_model(self, name: str, overrides: dict[str, Any] | None = None) -> None:
        """Load a model's versions now; raises when one fails (the versions that served
        before serve on, as a poll keeps them) or none is on disk. ``overrides`` (the
        parameters of a load's config) apply on top of the model's ``class_args`` until a
        load without them: when they change, every version is loaded afresh and swapped
        in at once, or, when one fails, none is
        (docs/repository.md#loading-with-a-config-override)."""
        with self._lock:
            config = self.configs.get(name) or self._found_on_disk(name)
            if (overrides or {}) != self.overrides.get(name, {}):
                self._reload(config, overrides or {})
                return
            self.unloaded.discard(name)
            for key in [k for k in self.failed if k[0] == name]:
                del self.failed[key]
            self._sync_models([config], stable_only=False)
            serving = sorted(v for m, v in self.served if m == name)
            errors = [
                f"version {v}: {reason}" for (m, v), (_, reason) in self.failed.items() if m == name
            ]
            if errors or not serving:
                still = f"; still serving version {', '.join(map(str, serving))}" if serving else ""
                waiting = [
                    f"version {v}: {why}" for (m, v), why in self.waiting.items() if m == name
                ]
                reason = "; ".join(errors or waiting) or "no version on disk"
                raise ModelNotReady(f"failed to load '{name}', {reason}{still}")

    def _overridden(self, config: ModelConfig) -> ModelConfig:
        """``config`` with its model's load overrides in its class_args."""
        overrides = self.overrides.get(config.name)
        if not overrides:
            return config
        return replace(config, class_args={**config.class_args, **overrides})

    def _reload(self, config: ModelConfig, overrides: dict[str, Any]) -> None:
        """Serve ``config``'s versions built with ``overrides``: all load first, unpublished;
        then they replace the versions served in one swap. A failure changes nothing."""
        name = config.name
        config = replace(config, class_args={**config.class_args, **overrides})
        on_disk = scan_versions(config.base_path)
        done_file = config.done_file or self.done_file
        complete = (v for v, path in on_disk.items() if not incomplete(path, done_file))
        versions = config.version_policy.select(complete)
        fresh: dict[Key, VersionRoute] = {}
        failures = []
        loads = [partial(self._load_version, config, v, on_disk[v]) for v in versions]
        try:
            for index, route in as_loaded(loads):
                if isinstance(route, VersionRoute):
                    fresh[(name, versions[index])] = route
                else:
                    failures.append(f"version {versions[index]}: {route[1]}")
        except BaseException:
            self._discard(fresh)
            raise
        if failures or not versions:
            self._discard(fresh)
            serving = sorted(v for m, v in self.served if m == name)
            still = f"; still serving version {', '.join(map(str, serving))}" if serving else ""
            reason = "; ".join(failures) or "no version on disk"
            raise ModelNotReady(f"failed to load '{name}', {reason}{still}")
        self.unloaded.discard(name)
        self.overrides.pop(name, None)
        if overrides:
            self.overrides[name] = overrides
        for key in [k for k in self.failed if k[0] == name]:
            del self.failed[key]
        leaving = {key: self.served.pop(key) for key in [k for k in self.served if k[0] == name]}
        self.retiring.update(leaving)
        self.served.update(fresh)
        self.publish()
        for route in leaving.values():
            route.retire()
        logger.info("serving model %s with its load's config: %s", name, overrides)

    def _found_on_disk(self, name: str) -> ModelConfig:
        """A model folder not in the config, loaded on request from then on."""
        found = scan_models(self.root).get(name) if self.root is not None else None
        if found is None:  # Triton's words: docs/protocol.md#errors
            raise ModelNotFound(f"failed to load '{name}': no such model in the repository")
        self.added[name] = self.configs[name] = ModelConfig(name, found)
        return self.added[name]

    def unload_model(self, name: str) -> None:
        with self._lock:
            if name not in self.configs:
                raise ModelNotFound(f"failed to unload '{name}': no such model in the repository")
            self.unloaded.add(name)
            self._retire([key for key in self.served if key[0] == name])

    def replace_config(self, configs: dict[str, ModelConfig]) -> None:
        """Serve exactly ``configs`` from now on (TF Serving's config reload), all or
        nothing: the versions the new config wants that are not served yet load first
        (side by side), unpublished. When one of them fails to load, or a configured
        model has no version on disk, those loads are undone and this raises with the
        reasons and nothing changed: the running config and its models keep serving.
        Otherwise the new versions are published in one swap, then the versions and
        models the new config leaves out retire; the files' config is no longer read."""
        with self._lock:
            fresh: dict[Key, VersionRoute] = {}
            failures: dict[Key, Failure] = {}
            keep: set[Key] = set()
            scanned: dict[str, dict[int, Path]] = {}
            jobs: list[tuple[ModelConfig, int, Path]] = []
            for config in configs.values():
                name = config.name
                scanned[name] = on_disk = scan_versions(config.base_path)
                done_file = config.done_file or self.done_file
                complete = (v for v, path in on_disk.items() if not incomplete(path, done_file))
                for version in config.version_policy.select(complete):
                    if (name, version) in self.served:
                        keep.add((name, version))
                    else:
                        jobs.append((self._overridden(config), version, on_disk[version]))
            try:
                for index, route in as_loaded([partial(self._load_version, *j) for j in jobs]):
                    key = (jobs[index][0].name, jobs[index][1])
                    if not isinstance(route, VersionRoute):
                        failures[key] = route
                    else:
                        fresh[key] = route
                        keep.add(key)
            except BaseException:
                self._discard(fresh)
                raise
            missing = sorted(name for name in configs if not any(m == name for m, _ in keep))
            if failures or missing:
                self._discard(fresh)
                problems = [
                    f"{m} version {v}: {why}" for (m, v), (_, why) in sorted(failures.items())
                ]
                failed = {m for m, _ in failures}
                problems += [f"{m}: no version on disk" for m in missing if m not in failed]
                raise ModelNotReady(
                    f"failed to load the new config ({'; '.join(problems)}); "
                    "the running config is unchanged"
                )
            self._replaced = dict(configs)
            self.configs = dict(configs)
            self.added.clear()
            self.unloaded.clear()
            for key in [k for k in self.failed if k[0] in configs]:
                del self.failed[key]
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

    def _discard(self, routes: dict[Key, VersionRoute]) -> None:
        """Unload versions loaded for a config that is not switched to (never published)."""
        for route in routes.values():
            route.retire()

    def unavailable(self, key: str) -> str | None:
        """Why ``m`` or ``m:v``, which no route serves, is unavailable: its load failed,
        or it is loading (a 503 with the reason rather than a 404); None when it is not
        known (or was unloaded on request)."""
        name, _, version = key.partition(":")
        if name in self.unloaded:
            return None

        def named(k: Key) -> bool:
            return k[0] == name and (not version or str(k[1]) == version)

        failed = sorted((v, why) for (m, v), (_, why) in dict(self.failed).items() if named((m, v)))
        if version and failed:
            return f"model {name} version {version} failed to load: {failed[0][1]}"
        if failed:
            reasons = "; ".join(f"version {v}: {why}" for v, why in failed)
            return f"model {name} failed to load: {reasons}"
        if any(named(k) for k in list(self.loading)):
            return f"model {key} is loading"
        return None

    def load_failures(self, name: str) -> dict[str, str]:
        """The versions of model ``name`` whose load failed, not served: ``{version: reason}``
        (TF Serving reports them in state END)."""
        return {
            str(v): why
            for (m, v), (_, why) in dict(self.failed).items()
            if m == name and (m, v) not in self.served
        }

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
