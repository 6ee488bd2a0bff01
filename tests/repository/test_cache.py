"""Lazy loading with an LRU cache: more models on disk than in memory."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mlserve.repository.cache import ModelCache
from mlserve.repository.routes import VersionRoute
from tests.repository.fixtures import LinearModel, wait_until, write_version

BODY = {"inputs": [[1.0, 2.0]]}


def test_only_used_models_load_and_the_least_recently_used_unloads(
    tmp_path: Path, serve_repo: Any
) -> None:
    base = tmp_path / "models"
    names = [f"m{i}" for i in range(5)]
    for i, name in enumerate(names):
        write_version(base, name, 1, bias=i)
    LinearModel.reset()
    server = serve_repo(base, [{"name": name} for name in names], cache_size=2)
    assert LinearModel.events == []  # nothing is loaded before it is used
    reasons = {e["name"]: e["reason"] for e in server.repository.index()}
    assert set(reasons.values()) == {"not in memory: loads on its first request"}
    assert server.test("/v2/health/ready", method="GET") == {"ready": True}

    def use(name: str) -> None:
        answer = server.test(f"/v2/models/{name}/infer", body=BODY)
        assert answer["outputs"] == [3.0 + names.index(name)]

    use("m0")
    use("m1")
    use("m0")  # m1 is now the least recently used
    use("m2")
    use("m3")
    use("m0")
    assert LinearModel.events == [
        ("load", "m0:1"),
        ("load", "m1:1"),
        ("load", "m2:1"),
        ("unload", "m1:1"),
        ("load", "m3:1"),
        ("unload", "m0:1"),
        ("load", "m0:1"),
        ("unload", "m2:1"),
    ]
    assert server.repository.cache.keys == ["m3:1", "m0:1"]
    assert len(list(server.iter_models())) == 2
    states = {e["name"]: e["state"] for e in server.repository.index()}
    assert states == {
        "m0": "READY",
        "m1": "UNAVAILABLE",
        "m2": "UNAVAILABLE",
        "m3": "READY",
        "m4": "UNAVAILABLE",
    }


def test_a_victim_in_use_unloads_when_its_request_ends() -> None:
    unloaded: list[str] = []
    cache = ModelCache(1)

    def route(key: str) -> VersionRoute:
        return VersionRoute(
            key,
            lambda: SimpleNamespace(ready=True),
            on_load=cache.loaded,
            on_unload=lambda r: unloaded.append(r.key),
        )

    first, second = route("a:1"), route("b:1")
    first.load()
    first._enter()  # a request in flight
    second.load()
    assert unloaded == [] and first.model is not None and cache.keys == ["b:1"]
    first._leave()
    wait_until(lambda: unloaded == ["a:1"])
    assert first.model is None
