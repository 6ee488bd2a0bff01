"""A shadow's agreement counts in its endpoint record (docs/graphs.md#shadow-routes), on
SQLite and on a real PostgreSQL: two servers of one function (two workers) add up."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mlserve
from mlserve.monitoring.stores import open_store
from tests.fixtures import Multiplier, Raising
from tests.monitoring.conftest import unique
from tests.traffic.test_shadow import wait_for


class Off(Multiplier):
    """Answers one more than its primary: every comparison disagrees."""

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [x + 1 for x in super().predict(request)]


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLSERVE_DATA_DIR", str(tmp_path / "mlserve-data"))
    monkeypatch.delenv("MLSERVE_ENDPOINT_STORE", raising=False)
    return tmp_path / "mlserve-data"


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{data_dir / 'endpoints.db'}"
    else:
        yield request.getfixturevalue("postgres").url


def _worker(project: str, store_url: str) -> Any:
    """A server of the function as deployed (endpoint records on), as one worker runs it."""
    fn = mlserve.new_function("shadowed", project=project)
    fn.add_model("m:v1", class_name=Multiplier, multiplier=2)
    fn.add_model("m:same", class_name=Multiplier, multiplier=2, shadow=True)
    fn.add_model("m:off", class_name=Off, multiplier=2, shadow=True)
    fn.add_model("m:broken", class_name=Raising, shadow=True)
    fn.spec.parameters.update(endpoint_store_url=store_url, endpoint_flush_seconds=600)
    fn.set_tracking("dummy://" + project)
    server = fn.to_graph_server()
    server.init_states(namespace={})
    server.init_object({})
    return server


def _shadow_records(store_url: str, project: str) -> dict[str, Any]:
    store = open_store(store_url)
    try:
        return {e.spec.model: e.status.metrics.get("shadow") for e in store.list(project)}
    finally:
        store.close()


def test_two_workers_agreement_counts_add_up_in_the_shadows_records(store_url: str) -> None:
    project = unique("p")
    workers = [_worker(project, store_url), _worker(project, store_url)]
    for calls, server in zip((3, 5), workers, strict=True):
        for i in range(calls):
            assert server.test("/v2/models/m/infer", {"inputs": [i]})["outputs"] == [2 * i]
        runners = server.graph.object.shadow_runners()
        wait_for(
            lambda r=runners, n=calls: all(
                sum(v.counts.to_dict().values()) == n for v in r.values()
            )
        )
        server.wait_for_completion()  # a worker's shutdown writes what it counted
    records = _shadow_records(store_url, project)
    assert records["m:v1"] is None  # the primary has no shadow counts
    assert records["m:same"] == {
        "agree": 8,
        "disagree": 0,
        "error": 0,
        "dropped": 0,
        "agreement": 1.0,
    }
    assert records["m:off"] == {
        "agree": 0,
        "disagree": 8,
        "error": 0,
        "dropped": 0,
        "agreement": 0.0,
    }
    assert records["m:broken"] == {
        "agree": 0,
        "disagree": 0,
        "error": 8,
        "dropped": 0,
        "agreement": None,
    }


def test_a_flush_writes_only_what_the_counts_gained(store_url: str) -> None:
    project = unique("p")
    server = _worker(project, store_url)
    registry = server.graph.routes["m:v1"].object.model_logger.registry
    counts = server.graph.object.shadow_runners
    for expected in (2, 4):
        for i in range(2):
            server.test("/v2/models/m/infer", {"inputs": [i]})
        wait_for(lambda n=expected: counts()["m:same"].counts.agree == n)
        registry.flush()
        registry.flush()  # nothing gained: nothing added
        assert _shadow_records(store_url, project)["m:same"]["agree"] == expected
    server.wait_for_completion()
    assert _shadow_records(store_url, project)["m:same"]["agree"] == 4


def test_a_store_written_before_shadows_gains_their_columns(data_dir: Path) -> None:
    path = data_dir / "old.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE model_endpoints (uid VARCHAR(40) PRIMARY KEY, project VARCHAR(255)"
            " NOT NULL, record TEXT NOT NULL, first_request VARCHAR(40), last_request"
            " VARCHAR(40), requests INTEGER NOT NULL, error_count INTEGER NOT NULL)"
        )
    project = unique("p")
    server = _worker(project, f"sqlite:///{path}")
    server.test("/v2/models/m/infer", {"inputs": [1]})
    runners = server.graph.object.shadow_runners
    wait_for(lambda: "m:off" in runners() and runners()["m:off"].counts.disagree == 1)
    server.wait_for_completion()
    assert _shadow_records(f"sqlite:///{path}", project)["m:off"]["disagree"] == 1
