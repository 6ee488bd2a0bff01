"""The web console's server side (docs/console.md): its routes, headers and data, on a
real ``mlserve serve`` and on the mock server, checked against the API's own answers."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import mlserve
from mlserve.core.recorder import LATENCY_BUCKETS
from mlserve.graph.plot import walk_graph
from mlserve.server.console import CONSOLE_HEADERS, configure_console
from mlserve.server.console_history import POINTS, History, quantile_ms
from tests.netserver import ServerProcess, start_server
from tests.server.console_fn import HOSTILE, serving_function

FN = "tests/server/console_fn.py"
TOKEN = "console-token"
CSP = CONSOLE_HEADERS["Content-Security-Policy"]


def call(
    server: ServerProcess,
    path: str,
    body: Any = None,
    token: str | None = None,
    accept: str | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One request, redirects not followed: status, headers (lower-case), body (JSON
    when it is JSON)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if accept:
        headers["Accept"] = accept
    data = json.dumps(body).encode() if body is not None else None
    connection.request("POST" if body is not None else "GET", path, data, headers)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    got = {key.lower(): value for key, value in response.getheaders()}
    if got.get("content-type", "").startswith("application/json"):
        return response.status, got, json.loads(raw)
    return response.status, got, raw


def ok(server: ServerProcess, path: str, body: Any = None, token: str | None = None) -> Any:
    status, _, answer = call(server, path, body, token)
    assert status == 200, (path, status, answer)
    return answer


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console") / "model-logs.jsonl"


@pytest.fixture(scope="module")
def served(stream: Path) -> Iterator[ServerProcess]:
    """Tracking on (stream and endpoint records)."""
    server = start_server(target=FN, env={"CONSOLE_STREAM": str(stream)})
    yield server
    server.stop()


@pytest.fixture(scope="module", params=["mlserve", "asgi"])
def guarded(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """Auth on, errors hidden, tracking off; on each HTTP face."""
    face = ["--http", request.param]
    server = start_server("--auth-token", TOKEN, "--hide-errors", *face, target=FN)
    yield server
    server.stop()


# ---- overview --------------------------------------------------------------------------


def test_overview_agrees_with_the_repository_index_and_model_metadata(
    served: ServerProcess,
) -> None:
    overview = ok(served, "/console/api/overview")
    info = overview["server"]
    assert info["name"] == "mlserve" and info["version"] == mlserve.__version__
    assert (info["function"], info["project"]) == ("console-tests", "console-project")
    assert info["model_control"] == "none" and info["auth"] is False
    assert info["hide_errors"] is False and info["worker"] is None
    assert info["tracking"] is True and info["monitor"] is False and info["store"] is True
    assert overview["history"] == {"every": 5, "seconds": 900}

    index = ok(served, "/v2/repository/index", {})
    listed = [{k: m[k] for k in ("name", "version", "state", "reason")} for m in overview["models"]]
    assert listed == index
    assert {m["state"] for m in overview["models"]} == {"READY", "UNAVAILABLE"}
    endpoints = ok(served, "/api/v1/projects/console-project/model-endpoints")
    uids = {e["metadata"]["uid"] for e in endpoints["endpoints"]}
    for model in overview["models"]:
        if model["state"] != "READY":
            continue
        path = "/v2/models/" + quote(model["name"], safe="")
        if model["version"]:
            path += f"/versions/{model['version']}"
        metadata = ok(served, path)
        assert model["inputs"] == metadata["inputs"] and model["outputs"] == metadata["outputs"]
        assert model["platform"] == metadata["platform"]
        assert model["kind"] == "model" and model["tfserving"] is True
        assert model["endpoint_uid"] in uids
    by_name = {m["name"]: m for m in overview["models"]}
    assert by_name["batched"]["batching"]["max_batch_size"] == 4
    assert by_name["batched"]["concurrency"] is None
    assert by_name["scale"]["batching"] is None
    assert by_name["scale"]["concurrency"] == {"threads": 32, "queue": 512}
    broken = by_name["broken"]
    assert broken["state"] == "UNAVAILABLE" and "weights are corrupt" in broken["reason"]
    assert by_name[HOSTILE]["name"] == HOSTILE  # a plain JSON string, as it was named


def test_hide_errors_holds_in_the_reason(guarded: ServerProcess) -> None:
    overview = ok(guarded, "/console/api/overview", token=TOKEN)
    assert overview["server"]["auth"] is True and overview["server"]["hide_errors"] is True
    assert overview["server"]["tracking"] is False and overview["server"]["store"] is False
    broken = next(m for m in overview["models"] if m["name"] == "broken")
    assert broken["reason"].startswith("internal error, error id ")
    assert "corrupt" not in json.dumps(overview)
    index = ok(guarded, "/v2/repository/index", {}, token=TOKEN)
    assert broken["reason"] == next(e for e in index if e["name"] == "broken")["reason"]


def test_each_worker_says_which_it_is() -> None:
    server = start_server("--workers", "2", target=FN)
    try:
        seen = set()
        for _ in range(40):
            worker = ok(server, "/console/api/overview")["server"]["worker"]
            assert worker["count"] == 2 and worker["index"] in (0, 1)
            seen.add(worker["index"])
        assert seen  # the kernel picks the worker; any of the two may answer them all
    finally:
        server.stop()


# ---- history ---------------------------------------------------------------------------


def test_history_counts_the_traffic_the_server_answered(served: ServerProcess) -> None:
    body = ok(served, "/console/api/sample/scale")["body"]
    for _ in range(20):
        ok(served, "/v2/models/scale/infer", body)
    bad = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2]}]}
    assert call(served, "/v2/models/scale/infer", bad)[0] == 400
    deadline = time.monotonic() + 30
    while True:
        history = ok(served, "/console/api/history")
        series = history["series"].get("scale:", {})
        if sum(series.get("rps", [])) > 0 and sum(series.get("errors", [])) > 0:
            break
        assert time.monotonic() < deadline, history
        time.sleep(1)
    assert history["every"] == 5 and abs(history["now"] - time.time()) < 60
    assert set(series) == {"t", "rps", "errors", "p50_ms", "p99_ms"}
    assert len({len(values) for values in series.values()}) == 1
    calls = sum(rps * 5 for rps in series["rps"])
    assert 20 <= round(calls) <= 21 + 5 * len(series["rps"])  # other tests' calls may add
    assert round(sum(e * 5 for e in series["errors"])) >= 1
    busy = [i for i, rps in enumerate(series["rps"]) if rps > 0]
    assert all(series["p50_ms"][i] is not None for i in busy)
    assert all(series["p50_ms"][i] <= series["p99_ms"][i] for i in busy)
    assert series["t"] == sorted(series["t"])


class _Recorder:
    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version
        self.counts = (0, 0, [0] * (len(LATENCY_BUCKETS) + 1))

    def snapshot(self) -> list[tuple[str, int, int, float, list[int], float]]:
        requests, errors, buckets = self.counts
        return [("infer", requests, errors, 0.0, list(buckets), 0.0)]


def test_history_points_are_rates_since_the_last_sample_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serving_function().to_mock_server()
    recorder = _Recorder("scale", "")
    monkeypatch.setattr("mlserve.server.console_history.recorders", lambda: [recorder])
    history = History()
    history.sample(server, now=1000.0)  # the first takes the counters in
    assert history.to_dict()["series"] == {}
    buckets = [0] * (len(LATENCY_BUCKETS) + 1)
    buckets[3] = 10  # ten calls of 2.5 to 5 ms
    recorder.counts = (12, 2, buckets)
    history.sample(server, now=1005.0)
    series = history.to_dict()["series"]["scale:"]
    assert series["t"] == [1005.0] and series["rps"] == [2.4] and series["errors"] == [0.4]
    assert 2.5 <= series["p50_ms"][0] <= series["p99_ms"][0] <= 5.0
    for step in range(POINTS + 20):
        history.sample(server, now=1010.0 + 5 * step)
    series = history.to_dict()["series"]["scale:"]
    assert len(series["t"]) == POINTS and series["rps"][-1] == 0.0
    assert series["p50_ms"][-1] is None  # no call: no latency


def test_quantiles_from_buckets() -> None:
    assert quantile_ms([0] * (len(LATENCY_BUCKETS) + 1), 0.5) is None
    only_slow = [0] * len(LATENCY_BUCKETS) + [4]
    assert quantile_ms(only_slow, 0.99) == LATENCY_BUCKETS[-1] * 1000
    first = [2] + [0] * len(LATENCY_BUCKETS)
    assert quantile_ms(first, 0.5) == pytest.approx(LATENCY_BUCKETS[0] * 1000 / 2)


# ---- sample ----------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["scale", "echo", "words", "batched", HOSTILE])
def test_the_sample_is_accepted_by_infer_and_predict(served: ServerProcess, model: str) -> None:
    sample = ok(served, "/console/api/sample/" + quote(model, safe=""))
    assert sample["path"] == f"/v2/models/{quote(model, safe='')}/infer"
    answer = ok(served, sample["path"], sample["body"])
    assert answer["model_name"] == model
    tfserving = sample["tfserving"]
    assert tfserving["path"] == f"/v1/models/{quote(model, safe='')}:predict"
    assert "predictions" in ok(served, tfserving["path"], tfserving["body"])


def test_the_sample_of_a_version_and_the_gen_json_it_shares(served: ServerProcess) -> None:
    sample = ok(served, "/console/api/sample/version/versions/1")
    assert sample["path"] == "/v2/models/version/versions/1/infer"
    assert ok(served, sample["path"], sample["body"])["outputs"][0]["data"] == [1]
    assert (
        ok(served, "/v1/models/scale/gen_json")
        == (ok(served, "/console/api/sample/scale")["tfserving"]["body"])
    )
    status, _, answer = call(served, "/console/api/sample/nothing")
    assert status == 404 and "nothing" in answer["error"]


def test_the_sample_of_a_tensorflow_saved_model() -> None:
    pytest.importorskip("tensorflow")
    server = start_server(target="examples/tf_repository")
    try:
        models = ok(server, "/console/api/overview")["models"]
        model = next(m for m in models if m["name"] == "half_plus_two" and m["state"] == "READY")
        assert model["platform"] == ok(server, "/v2/models/half_plus_two")["platform"]
        sample = ok(server, "/console/api/sample/half_plus_two")
        answer = ok(server, sample["path"], sample["body"])
        predicted = ok(server, sample["tfserving"]["path"], sample["tfserving"]["body"])
        assert answer["outputs"][0]["data"] == predicted["predictions"]  # one x, one answer
        assert len(predicted["predictions"]) == 1
    finally:
        server.stop()


# ---- graph -----------------------------------------------------------------------------


def test_the_graph_of_a_router_function(served: ServerProcess) -> None:
    graph = ok(served, "/console/api/graph")
    assert graph["topology"] == "router"
    nodes = {node["id"]: node for node in graph["nodes"]}
    assert nodes["start"]["kind"] == "entry" and nodes["router"]["kind"] == "router"
    scale = nodes["router/scale"]
    assert scale["kind"] == "route" and scale["parent"] == "router"
    assert scale["class"] == "tests.http.fn.Scale" and scale["label"] == "scale"
    assert scale["params"]["factor"] == 3 and scale["params"]["api_token"] == "***"
    assert nodes[f"router/{HOSTILE}"]["label"] == HOSTILE
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}
    assert ("start", "router", "next") in edges and ("router", "router/scale", "route") in edges


def test_the_graph_of_a_flow_is_the_walk_the_picture_draws() -> None:
    fn = mlserve.new_function("flow")
    fn.add_child_function("scorer")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="prep", handler="tests.graph.models.inc").to(">>", name="q").to(
        name="score", handler="tests.graph.models.double", function="scorer"
    ).respond()
    graph.error_handler(name="catch", handler="tests.graph.models.catch", full_event=True)
    server = fn.to_mock_server()
    answer = server.test("/console/api/graph")
    assert answer["topology"] == "flow"
    nodes = {node["id"]: node for node in answer["nodes"]}
    assert {k: nodes[k]["kind"] for k in nodes} == {
        "start": "entry",
        "prep": "task",
        "q": "queue",
        "score": "task",
        "catch": "error",
    }
    assert nodes["score"]["function"] == "scorer" and nodes["score"]["responder"] is True
    assert nodes["prep"]["class"] == "tests.graph.models.inc"
    edges = {(e["from"], e["to"], e["kind"]) for e in answer["edges"]}
    assert {("start", "prep", "next"), ("prep", "q", "next"), ("q", "score", "next")} <= edges
    assert ("score", "catch", "error") in edges
    walked = walk_graph(fn.spec.graph)
    assert [(e.tail, e.head, e.kind) for e in walked.edges] == [
        (e["from"], e["to"], e["kind"]) for e in answer["edges"]
    ]


# ---- records ---------------------------------------------------------------------------


def test_records_are_the_models_last_ones_newest_first(served: ServerProcess) -> None:
    body = ok(served, "/console/api/sample/echo")["body"]
    for number in range(5):
        ok(served, "/v2/models/echo/infer", {**body, "id": f"needle-{number}"})
    answer = ok(served, "/console/api/records?model=echo&n=3")
    assert answer["source"] == "memory"
    ids = [record["request"]["id"] for record in answer["records"]]
    assert ids == ["needle-4", "needle-3", "needle-2"]
    assert all(record["model"] == "echo" for record in answer["records"])
    found = ok(served, "/console/api/records?model=echo&q=needle-1")["records"]
    assert [record["request"]["id"] for record in found] == ["needle-1"]
    assert ok(served, "/console/api/records?model=nobody")["records"] == []
    for query in ("model=echo&n=0", "model=echo&n=501", "model=echo&n=x", "n=3"):
        status, _, refused = call(served, "/console/api/records?" + query)
        assert status == 400 and refused["error"], query


def test_records_with_tracking_off_say_none(guarded: ServerProcess) -> None:
    answer = ok(guarded, "/console/api/records?model=echo", token=TOKEN)
    assert answer == {"records": [], "source": "none"}


def test_records_of_several_workers_come_from_the_stream_file(tmp_path: Path) -> None:
    fn = serving_function()
    stream = tmp_path / "logs.jsonl"
    fn.set_tracking(stream_path=str(stream))
    server = fn.to_mock_server()
    configure_console(server, True, False, worker=(0, 2))
    lines = [{"model": "echo", "request": {"id": f"other-worker-{n}"}} for n in range(3)]
    lines.insert(1, {"model": "scale", "request": {"id": "not-echo"}})
    stream.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    answer = server.test("/console/api/records?model=echo&n=2")
    assert answer["source"] == "file"
    assert [r["request"]["id"] for r in answer["records"]] == ["other-worker-2", "other-worker-1"]


# ---- routes, auth and headers ------------------------------------------------------------


def test_a_browser_at_the_root_is_sent_to_the_console(served: ServerProcess) -> None:
    status, headers, _ = call(served, "/", accept="text/html,application/xhtml+xml,*/*;q=0.8")
    assert status == 302 and headers["location"] == "/console"
    status, _, listing = call(served, "/", accept="application/json")
    assert status == 200 and listing == ok(served, "/")


def test_the_page_and_its_files_carry_the_policy(served: ServerProcess) -> None:
    for path in ("/console", "/console/", "/console/static/index.html"):
        status, headers, page = call(served, path)
        assert status == 200 and headers["content-type"].startswith("text/html"), path
        assert headers["content-security-policy"] == CSP
        assert headers["x-content-type-options"] == "nosniff"
        assert b"<html" in page.lower()
    status, headers, _ = call(served, "/console/api/overview")
    assert status == 200 and headers["content-security-policy"] == CSP


def test_names_outside_the_console_folder_are_refused(served: ServerProcess) -> None:
    for path in (
        "/console/static/../../pyproject.toml",
        "/console/static/..%2f..%2fpyproject.toml",
        "/console/static/%2e%2e/cli.py",
        "/console/static/../cli.py",
        "/console/static/",
        "/console/static/.hidden",
        "/console/static/nothing.js",
        "/console/static/index.html%00.js",
        "/console/nothing",
    ):
        status, _, answer = call(served, path)
        assert status in (400, 404), (path, status)
        assert isinstance(answer, dict) and answer["error"], path


def test_data_needs_the_token_and_the_page_does_not(guarded: ServerProcess) -> None:
    for path in (
        "/console/api/overview",
        "/console/api/history",
        "/console/api/graph",
        "/console/api/sample/scale",
        "/console/api/records?model=scale",
    ):
        status, headers, answer = call(guarded, path)
        assert status == 401 and answer == {"error": "authentication required"}, path
        assert "basic" not in headers["www-authenticate"].lower()  # no browser login box
        assert call(guarded, path, token="wrong")[0] == 401
        assert call(guarded, path, token=TOKEN)[0] == 200, path
    assert call(guarded, "/console")[0] == 200
    assert call(guarded, "/console/static/index.html")[0] == 200
    status, headers, _ = call(guarded, "/", accept="text/html")
    assert status == 302 and headers["location"] == "/console"
    assert call(guarded, "/", accept="application/json")[0] == 401  # the API's root still needs it
    assert call(guarded, "/v2/models/scale")[0] == 401


def test_an_unloaded_model_is_unloaded_not_failed() -> None:
    server = start_server("--model-control-mode", "explicit", target=FN)
    try:
        ok(server, "/v2/repository/models/echo/unload", {})
        index = ok(server, "/v2/repository/index", {})
        assert {
            "name": "echo",
            "version": "",
            "state": "UNAVAILABLE",
            "reason": "unloaded",
        } in index
        models = ok(server, "/console/api/overview")["models"]
        assert ok(server, "/console/api/overview")["server"]["model_control"] == "explicit"
        echo = next(m for m in models if m["name"] == "echo")
        assert (echo["state"], echo["reason"]) == ("UNLOADED", "")
        ok(server, "/v2/repository/models/echo/load", {})
        models = ok(server, "/console/api/overview")["models"]
        assert next(m for m in models if m["name"] == "echo")["state"] == "READY"
    finally:
        server.stop()


def test_no_console_turns_it_all_off() -> None:
    server = start_server("--no-console", "--auth-token", TOKEN, target=FN)
    try:
        for path in ("/console", "/console/static/index.html", "/console/api/overview"):
            assert call(server, path)[0] == 401, path  # nothing is open without the token
            status, headers, _ = call(server, path, token=TOKEN)
            assert status == 404, path
        status, headers, listing = call(server, "/", token=TOKEN, accept="text/html")
        assert status == 200 and "location" not in headers
        assert listing == ok(server, "/", token=TOKEN)
    finally:
        server.stop()


def test_the_mock_server_answers_the_data_too() -> None:
    server = serving_function().to_mock_server()
    overview = server.test("/console/api/overview")
    assert overview["server"]["tracking"] is False
    assert {m["name"] for m in overview["models"]} >= {"scale", "echo", HOSTILE}
    assert server.test("/console/api/records?model=echo") == {"records": [], "source": "none"}
    assert server.test("/console/api/history")["series"] == {}
