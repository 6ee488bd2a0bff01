"""Endpoint records (docs/monitoring.md#endpoint-records) on SQLite (the default) and on
a real PostgreSQL."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import mlserve
from mlserve.graph.routers import BaseModelRouter
from mlserve.monitoring.endpoints import endpoint_uid
from mlserve.monitoring.stores import open_store
from tests.monitoring.conftest import FailingModel, SumModel, unique

ROOT = Path(__file__).resolve().parents[2]
ROWS = {"inputs": [[1, 2]]}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{data_dir / 'endpoints.db'}"
    else:
        yield request.getfixturevalue("postgres").url


def make_function(
    project: str, store_url: str, model_path: str = "/models/a", tag: str = ""
) -> Any:
    fn = mlserve.new_function("fn", project=project, tag=tag)
    fn.add_model("m1", class_name=SumModel, model_path=model_path, labels={"team": "x"})
    fn.add_model("m2:v1", class_name=SumModel)
    fn.add_model("bad", class_name=FailingModel)
    fn.spec.parameters.update(endpoint_store_url=store_url, endpoint_flush_seconds=600)
    fn.set_tracking("dummy://" + project)
    return fn


def start(fn: Any) -> Any:
    """A server of ``fn`` as deployed (not the mock): stream and endpoint records on."""
    server = fn.to_graph_server()
    server.init_states(namespace={})
    server.init_object({})
    return server


def test_uid_is_sha1_of_project_function_tag_model_version() -> None:
    # an unversioned model hashes with version "latest", as mlrun's uid
    expected = hashlib.sha1(b"p_fn_N/A_m1_latest").hexdigest()
    assert endpoint_uid("p", "fn", "", "m1", "") == expected
    assert endpoint_uid("p", "fn", "", "m1", "latest") == expected
    assert endpoint_uid("p", "fn", "t", "m", "v") == hashlib.sha1(b"p_fn_t_m_v").hexdigest()


def test_models_are_registered_once_at_start(store_url: str) -> None:
    project = unique("p")
    server = start(make_function(project, store_url))
    server.wait_for_completion()
    store = open_store(store_url)
    endpoints = {e.spec.model: e for e in store.list(project)}
    assert sorted(endpoints) == ["bad:latest", "m1:latest", "m2:v1"]
    m1 = endpoints["m1:latest"]
    assert m1.metadata.uid == endpoint_uid(project, "fn", "", "m1", "")
    assert endpoints["m2:v1"].metadata.uid == endpoint_uid(project, "fn", "", "m2", "v1")
    assert m1.metadata.labels == {"team": "x"}
    assert (m1.spec.function_uri, m1.spec.model_class, m1.spec.model_uri) == (
        f"{project}/fn",
        "SumModel",
        "/models/a",
    )
    assert (m1.spec.stream_path, m1.spec.monitoring_mode, m1.spec.active) == (
        f"dummy://{project}",
        "enabled",
        True,
    )
    assert m1.status.endpoint_type == 1 and m1.status.first_request is None
    store.close()


def test_restart_never_duplicates_and_a_change_updates(store_url: str) -> None:
    project = unique("p")
    for _ in range(2):
        start(make_function(project, store_url)).wait_for_completion()
    changed = make_function(project, store_url, model_path="/models/b")
    changed.set_tracking("dummy://" + project, enable_tracking=True)
    changed.spec.tracking["stream_path"] = "dummy://other"
    start(changed).wait_for_completion()
    store = open_store(store_url)
    endpoints = store.list(project)
    assert len(endpoints) == 3
    m1 = next(e for e in endpoints if e.spec.model == "m1:latest")
    assert (m1.spec.model_uri, m1.spec.stream_path) == ("/models/b", "dummy://other")
    store.close()


def test_tracking_mode_change_updates_the_record(store_url: str) -> None:
    project = unique("p")
    start(make_function(project, store_url)).wait_for_completion()
    fn = make_function(project, store_url)
    fn.spec.tracking = {}
    server = fn.to_mock_server(track_models=True)  # endpoint records without the stream
    server.wait_for_completion()
    store = open_store(store_url)
    assert {e.spec.monitoring_mode for e in store.list(project)} == {"disabled"}
    store.close()


def test_request_counters_are_written_in_batches(store_url: str) -> None:
    project = unique("p")
    server = start(make_function(project, store_url))
    for _ in range(3):
        server.test("/v2/models/m1/infer", ROWS)
    server.test("/v2/models/bad/infer", ROWS, silent=True)
    store = open_store(store_url)
    before = {e.spec.model: e for e in store.list(project)}
    assert before["m1:latest"].status.last_request is None  # nothing written per request
    server.wait_for_completion()
    server.test("/v2/models/m1/infer", ROWS)  # a restarted counter, flushed again later
    server.wait_for_completion()
    after = {e.spec.model: e for e in store.list(project)}
    m1, bad = after["m1:latest"], after["bad:latest"]
    assert m1.status.metrics == {"requests": 4} and m1.status.error_count == 0
    assert m1.status.first_request < m1.status.last_request
    assert bad.status.error_count == 1 and bad.status.metrics == {"requests": 1}
    assert after["m2:v1"].status.last_request is None
    store.close()


def test_calls_counted_from_many_threads_are_all_written(store_url: str) -> None:
    """Successful calls are counted without a lock: none may be lost to a race, and the
    first and last starts are the earliest and latest; after a close, counting goes on."""
    project = unique("p")
    server = start(make_function(project, store_url))
    model = server.graph.routes["m1"].object
    tracker = model.model_logger
    tracker.pusher = None  # only the counters here
    base = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    threads, calls = 8, 5000

    def call(index: int) -> None:
        for i in range(calls):
            start = base + timedelta(microseconds=index * calls + i)
            tracker.push(model, start, ROWS, {"outputs": [3]}, "infer", 5)

    workers = [threading.Thread(target=call, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    tracker.registry.flush()
    tracker.push(model, base - timedelta(seconds=1), ROWS, {"outputs": [3]}, "infer", 5)
    tracker.close()
    tracker.push(model, base + timedelta(hours=1), ROWS, {"outputs": [3]}, "infer", 5)
    assert tracker.registry._thread is not None  # the flusher runs again
    tracker.registry.close()
    store = open_store(store_url)
    (m1,) = [e for e in store.list(project) if e.spec.model == "m1:latest"]
    store.close()
    assert m1.status.metrics == {"requests": threads * calls + 2}
    assert m1.status.first_request == base - timedelta(seconds=1)
    assert m1.status.last_request == base + timedelta(hours=1)


def test_a_model_call_counts_at_its_start(store_url: str) -> None:
    """A model hands its tracker its call's time_ns() start; user code a datetime: both
    count, and the record's first and last requests are those starts."""
    project = unique("p")
    server = start(make_function(project, store_url))
    model = server.graph.routes["m1"].object
    tracker = model.model_logger
    tracker.pusher = None  # only the counters here
    before = datetime.now(UTC)
    server.test("/v2/models/m1/infer", ROWS)
    after = datetime.now(UTC)
    late = after + timedelta(minutes=5)
    tracker.push(model, late, ROWS, {"outputs": [3]}, "infer", 5)
    tracker.close()
    store = open_store(store_url)
    (m1,) = [e for e in store.list(project) if e.spec.model == "m1:latest"]
    store.close()
    assert m1.status.metrics == {"requests": 2}
    assert before - timedelta(microseconds=1) <= m1.status.first_request <= after
    assert m1.status.last_request == late


class Ensemble(BaseModelRouter):
    """Stands for VotingEnsemble: any router that is not a plain ModelRouter."""


def test_an_ensemble_is_a_router_with_leaf_children(store_url: str) -> None:
    project = unique("p")
    fn = mlserve.new_function("fn", project=project)
    fn.set_topology("router", Ensemble, name="vote")
    fn.add_model("a", class_name=SumModel)
    fn.add_model("b", class_name=SumModel)
    fn.spec.parameters["endpoint_store_url"] = store_url
    fn.set_tracking("dummy://" + project)
    start(fn).wait_for_completion()
    store = open_store(store_url)
    endpoints = {e.spec.model: e for e in store.list(project)}
    router = endpoints["vote:latest"]
    assert router.status.endpoint_type == 2 and router.spec.model_class == "Ensemble"
    assert router.status.children == ["a", "b"]
    assert router.status.children_uids == [
        endpoints["a:latest"].metadata.uid,
        endpoints["b:latest"].metadata.uid,
    ]
    assert {endpoints[k].status.endpoint_type for k in ("a:latest", "b:latest")} == {3}
    store.close()


def test_read_api_lists_and_gets_endpoints(store_url: str) -> None:
    project = unique("p")
    server = start(make_function(project, store_url))
    try:
        server.test("/v2/models/m1/infer", ROWS)
        listed = server.test(f"/api/v1/projects/{project}/model-endpoints")["endpoints"]
        assert len(listed) == 3
        uid = endpoint_uid(project, "fn", "", "m1", "")
        one = server.test(f"/api/v1/projects/{project}/model-endpoints/{uid}")
        assert one["spec"]["model"] == "m1:latest"
        assert one["status"]["metrics"] == {"requests": 1} and one["status"]["last_request"]
        missing = server.test(f"/api/v1/projects/{project}/model-endpoints/nope", silent=True)
        assert missing.status_code == 404
        other = server.test("/api/v1/projects/elsewhere/model-endpoints")
        assert other == {"endpoints": []}
    finally:
        server.wait_for_completion()


async def test_read_api_over_http(data_dir: Path) -> None:
    import httpx

    from mlserve.http.app import create_app

    project = unique("p")
    server = start(make_function(project, f"sqlite:///{data_dir / 'endpoints.db'}"))
    transport = httpx.ASGITransport(app=create_app(server))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            answer = await client.get(f"/api/v1/projects/{project}/model-endpoints")
        assert answer.status_code == 200
        assert len(answer.json()["endpoints"]) == 3
    finally:
        server.wait_for_completion()


def test_cli_prints_a_table(store_url: str) -> None:
    project = unique("p")
    server = start(make_function(project, store_url))
    server.test("/v2/models/m1/infer", ROWS)
    server.wait_for_completion()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlserve",
            "endpoints",
            "list",
            "--store",
            store_url,
            "--project",
            project,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert out[0].split()[:4] == ["PROJECT", "MODEL", "TYPE", "FUNCTION"]
    rows = {line.split()[1]: line.split() for line in out[1:]}
    assert sorted(rows) == ["bad:latest", "m1:latest", "m2:v1"]
    assert rows["m1:latest"][:6] == [project, "m1:latest", "node", f"{project}/fn", "SumModel", "1"]
    assert rows["m1:latest"][-1] == endpoint_uid(project, "fn", "", "m1", "")
