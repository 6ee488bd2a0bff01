"""Graphs to dict / YAML and back, and an exported flow served over HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import mlserve
from mlserve.graph.steps import step_from_dict
from tests.graph.models import Const
from tests.netserver import start_server


def rich_flow() -> mlserve.ServingFunction:
    fn = mlserve.new_function("ser", project="p")
    fn.add_child_function("f2", url="http://child")
    graph = fn.set_topology("flow", engine="async")
    graph.to(
        name="prep", handler="tests.graph.models.add_tag", input_path="x", result_path="y.z"
    ).to("tests.graph.models.Scale", name="scale", factor=1, full_event=False).to(
        "*", name="router"
    ).to(name="post", handler="(event['outputs'])").respond()
    graph["prep"].error_handler(name="fix", handler="(dict(fixed=True))", before="post")
    graph.add_step(name="audit", handler="tests.graph.models.record", after="prep")
    graph.add_step(">>", name="q", after="audit", path="kafka://127.0.0.1:1?topic=t")
    graph.add_step(name="child", handler="tests.graph.models.record", after="q", function="f2")
    graph.error_handler(name="catch", handler="tests.graph.models.catch", full_event=True)
    fn.add_model("m1", class_name=Const, value=1)
    ens = graph.add_step(
        mlserve.VotingEnsemble(weights={"a": 1}), name="vote", after="q", function="f2"
    )
    ens.add_route("a", class_name=Const, value=2)
    return fn


def test_every_step_round_trips() -> None:
    graph = rich_flow().spec.graph
    assert graph is not None
    struct = graph.to_dict()
    assert (
        struct["kind"] == "root" and struct["engine"] == "async" and struct["on_error"] == "catch"
    )
    kinds = {name: step["kind"] for name, step in struct["steps"].items()}
    assert kinds == {
        "prep": "task",
        "fix": "error",
        "scale": "task",
        "router": "router",
        "post": "task",
        "audit": "task",
        "q": "queue",
        "child": "task",
        "catch": "error",
        "vote": "router",
    }
    assert struct["steps"]["router"]["routes"]["m1"]["class_args"] == {"value": 1, "protocol": "v2"}
    assert struct["steps"]["fix"]["before"] == ["post"]
    assert struct["steps"]["post"]["responder"] is True
    rebuilt = step_from_dict(struct)
    assert type(rebuilt) is mlserve.RootFlowStep
    assert rebuilt.to_dict() == struct
    for name, step in graph.steps.items():
        assert step_from_dict(step.to_dict(), name=name).to_dict() == step.to_dict()


def test_function_yaml_round_trip(tmp_path: Path) -> None:
    fn = rich_flow()
    path = fn.export(str(tmp_path / "fn.yaml"))
    again = mlserve.import_function(path)
    assert again.to_dict() == fn.to_dict()
    assert again.to_yaml() == fn.to_yaml()


def served_flow() -> mlserve.ServingFunction:
    fn = mlserve.new_function("served")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="prep", handler="tests.graph.models.inc").to(
        name="bad", handler="(event if event < 100 else 1 / 0)"
    ).to(name="post", handler="(event * 2)").respond()
    graph.error_handler(name="catch", handler="tests.graph.models.catch", full_event=True)
    return fn


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> object:
    path = served_flow().export(str(tmp_path_factory.mktemp("export") / "served.yaml"))
    server = start_server(target=path)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.mark.parametrize("body", [1, 150, "x"])
def test_http_answers_as_the_mock_server(http_url: str, body: object) -> None:
    mock = served_flow().to_mock_server()
    try:
        expected = mock.test(body=body, silent=True)
        response = httpx.post(http_url + "/", json=body, timeout=30)
    finally:
        mock.wait_for_completion()
    status = getattr(expected, "status_code", 200)
    expected_body = getattr(expected, "body", expected)
    assert response.status_code == status
    assert response.json() == expected_body
    if body == 150:
        assert expected_body == {
            "error": {"bad": "ZeroDivisionError: division by zero"},
            "origin": "bad",
        }
