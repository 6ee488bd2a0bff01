"""mlrun's own graph scenarios (tests/serving/test_flow.py, test_async_flow.py,
test_serving.py), ported by changing imports; docs/graphs.md and docs/serving.md decide
the answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mlserve
from mlserve import ServingRequestError
from mlserve.graph.ensembles import ParallelRun, VotingEnsemble
from tests.graph import models
from tests.netserver import start_server

STEPS = Path(__file__).with_name("compat_steps.py")
ROWS = {"inputs": [[1, 2], [3, 4]]}


def code_flow(engine: str) -> tuple[mlserve.ServingFunction, mlserve.RootFlowStep]:
    fn = mlserve.code_to_function("compat", filename=str(STEPS))
    graph = fn.set_topology("flow", engine=engine)
    assert isinstance(graph, mlserve.RootFlowStep)
    return fn, graph


def answer(fn: mlserve.ServingFunction, body: Any = None, path: str = "/") -> Any:
    server = fn.to_mock_server()
    try:
        return server.test(path, body=body, silent=True)
    finally:
        server.wait_for_completion()


# ---- test_flow.py ---------------------------------------------------------------------


def test_basic_flow_of_classes_and_expressions(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to("Echo", name="s1").to(name="s2", handler="(event + 1)").to(
        "Add", name="s3", value=10
    ).to(name="s4", handler="(event * 2)").respond()
    assert answer(fn, 5) == 32


def test_add_step_before_and_after_prev(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.add_step(name="a", handler="(event + 1)")
    graph.add_step(name="b", handler="(event * 10)", after="$prev")
    graph.add_step(name="c", handler="(event - 3)", after="$prev").respond()
    graph.add_step(name="between", handler="(event * 2)", before="b")
    assert graph["b"].after == ["between"]
    assert graph["between"].after == ["a"]
    assert answer(fn, 1) == (1 + 1) * 2 * 10 - 3


def test_insert_step_at_the_start(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to(name="x", handler="(event + 1)").to(name="y", handler="(event * 3)").respond()
    graph.insert_step("first", mlserve.TaskStep(handler="(event * 100)"), before="x")
    assert graph["x"].after == ["first"]
    assert answer(fn, 1) == (100 + 1) * 3


def test_path_control_nested_keys(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to("Add", name="add", input_path="x.y", result_path="res.deep", value=5).respond()
    assert answer(fn, {"x": {"y": 1}, "keep": True}) == {
        "x": {"y": 1},
        "keep": True,
        "res": {"deep": 6},
    }


def test_on_error_graph_handler(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to("Echo", name="s1").to(name="raiser", handler="fail").to("Echo", name="s3").respond()
    graph.error_handler(name="catcher", handler="on_error", full_event=True)
    assert answer(fn, 7) == {"error": {"raiser": "ValueError: bad 7"}, "origin": "raiser"}


def test_per_step_error_handler_goes_on(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to(name="raiser", handler="fail").error_handler(
        name="fix", handler="(99)", before="after"
    )
    graph.add_step(name="after", handler="(event + 1)", after="raiser").respond()
    assert answer(fn, 1) == 100


def test_error_without_handler_fails_the_request(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to(name="raiser", handler="fail").respond()
    response = answer(fn, 3)
    assert response.status_code == 500
    assert "bad 3" in response.body["error"]
    with pytest.raises(ServingRequestError):
        fn.to_mock_server().test("/", body=3)


def test_router_in_a_flow_with_router_step() -> None:
    fn = mlserve.new_function("routed")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="pre", handler="(event)").to("*", name="r1").to(
        name="post", handler="(event)"
    ).respond()
    graph.add_step("*", name="r2", after="pre")
    with pytest.raises(ValueError, match="router_step"):
        fn.add_model("m1", class_name=models.Const, value=1)
    fn.add_model("m1", class_name=models.Const, router_step="r1", value=7)
    fn.add_model("m1", class_name=models.Const, router_step="r2", value=8)  # a branch
    server = fn.to_mock_server()
    try:
        result = server.test("/v2/models/m1/infer", body=ROWS)
    finally:
        server.wait_for_completion()
    assert result["model_name"] == "m1"
    assert result["outputs"] == [7, 7]  # the responder follows r1


# ---- test_async_flow.py: branches ------------------------------------------------------


def branchy(graph: mlserve.RootFlowStep, responder: str) -> None:
    graph.to(name="start", handler="(event)").to(name="a", handler="tag_a")
    graph.add_step(name="b", handler="tag_b", after="start")
    graph.add_step(name="join", handler="(event)", after=["a", "b"])
    graph[responder].respond()


def test_async_branches_with_a_join() -> None:
    fn, graph = code_flow("async")
    branchy(graph, "join")
    body = answer(fn, {"x": 1})
    assert body in ({"x": 1, "a": 1}, {"x": 1, "b": 2})


def test_async_responder_in_a_branch() -> None:
    fn, graph = code_flow("async")
    branchy(graph, "b")
    assert answer(fn, {"x": 1}) == {"x": 1, "b": 2}


def test_async_error_in_a_branch_with_handler() -> None:
    fn, graph = code_flow("async")
    graph.to(name="start", handler="(event)").to(name="bad", handler="fail")
    graph.add_step(name="good", handler="tag_a", after="start").to(name="last", handler="(event)")
    graph["last"].respond()
    graph["bad"].error_handler(name="catch", handler="on_error", full_event=True)
    body = answer(fn, {"x": 1})
    assert body in (
        {"x": 1, "a": 1},
        {"error": {"bad": "ValueError: bad {'x': 1}"}, "origin": "bad"},
    )


def test_async_error_in_a_branch_without_handler_keeps_the_flow_alive() -> None:
    fn, graph = code_flow("async")
    graph.to(name="start", handler="(event)").to(name="bad", handler="fail")
    graph.add_step(name="good", handler="tag_a", after="start").respond()
    server = fn.to_mock_server()
    try:
        first = server.test("/", body={"x": 1}, silent=True)
        second = server.test("/", body={"x": 2}, silent=True)
    finally:
        server.wait_for_completion()
    for response, x in ((first, 1), (second, 2)):  # the flow lives on after a failure
        if getattr(response, "status_code", 200) == 500:
            assert response.body == {"error": f"ValueError: bad {{'x': {x}}}"}
        else:
            assert response == {"x": x, "a": 1}


def test_wait_for_completion_runs_the_steps_after_the_responder() -> None:
    fn = mlserve.new_function("tail")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="first", handler="(event + 1)").respond().to(
        name="tail", handler="tests.graph.models.record"
    )
    server = fn.to_mock_server()
    assert [server.test("/", body=n) for n in range(20)] == list(range(1, 21))
    server.wait_for_completion()
    assert sorted(models.seen) == list(range(1, 21))


# ---- the body is always JSON -------------------------------------------------------------


@pytest.mark.parametrize("responds", [True, False])
def test_numpy_results_become_json(engine: str, responds: bool) -> None:
    fn, graph = code_flow(engine)
    step = graph.to(name="arr", handler="to_array")
    if responds or engine == "sync":
        step.respond()
        assert answer(fn, 2) == [0, 2, 4]
    else:
        body = answer(fn, 2)
        assert set(body) == {"id"}


def test_numpy_scalars_become_json(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to(name="nums", handler="to_numbers").respond()
    assert answer(fn, 4) == {"f": 0.5, "i": 4, "l": [1]}


def test_an_object_result_is_an_error_response_not_an_exception(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to(name="opaque", handler="to_opaque").respond()
    response = answer(fn, 1)
    assert response.status_code == 500
    assert "Opaque" in response.body["error"]


# ---- ensembles (test_serving.py) ---------------------------------------------------------


def ensemble_fn(**kwargs: Any) -> mlserve.ServingFunction:
    fn = mlserve.new_function("ens")
    fn.set_topology("router", class_name=VotingEnsemble(**kwargs))
    fn.add_model("m1", class_name=models.Const, value=1)
    fn.add_model("m2", class_name=models.Const, value=2)
    fn.add_model("m3", class_name=models.Const, value=2)
    return fn


def test_voting_classification_majority_and_listing() -> None:
    fn = ensemble_fn(name="vote", weights={"m1": 2, "m2": 1, "m3": 1})
    server = fn.to_mock_server()
    try:
        voted = server.test("/v2/models/vote/infer", body=ROWS)
        child = server.test("/v2/models/m1/infer", body=ROWS)
        listing = server.test("/v2/models/", method="GET")
    finally:
        server.wait_for_completion()
    # m1 has half the weight, m2+m3 the other half: a tie goes to the lowest class
    assert voted["outputs"] == [1, 1]
    assert voted["model_name"] == "vote"
    assert child["model_name"] == "m1"
    assert child["outputs"] == [1, 1]
    assert "vote" in listing["models"]
    assert listing["weights"] == {"m1": 2, "m2": 1, "m3": 1}  # as given, as mlrun lists them


def test_voting_regression_weights_missing_children_get_zero() -> None:
    fn = ensemble_fn(vote_type="regression", weights={"m1": 1, "m2": 3})
    assert answer(fn, ROWS, "/v2/models/infer")["outputs"] == [1.75, 1.75]


def test_parallel_run_extends_the_event() -> None:
    fn = mlserve.new_function("par")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(ParallelRun(extend_event=True, executor_type="thread"), name="par").respond()
    graph["par"].add_route("a", handler="tests.graph.models.merge_a")
    graph["par"].add_route("b", handler="tests.graph.models.merge_b")
    assert answer(fn, {"x": 3}) == {"x": 3, "a": 4, "b": 6}


# ---- exported and served over HTTP -------------------------------------------------------


def served() -> mlserve.ServingFunction:
    fn, graph = code_flow("async")
    graph.to(name="start", handler="(event)").to(name="arr", handler="to_numbers").respond()
    graph.add_step(name="side", handler="tag_a", after="start")
    graph.error_handler(name="catch", handler="on_error", full_event=True)
    return fn


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("compat")
    path = served().export(str(folder / "fn.yaml"))
    server = start_server(target=path)
    try:
        yield server.url
    finally:
        server.stop()


def test_export_and_import_keep_the_code(tmp_path: Path) -> None:
    fn = served()
    again = mlserve.import_function(fn.export(str(tmp_path / "fn.yaml")))
    assert again.to_dict() == fn.to_dict()
    assert answer(again, 3) == answer(fn, 3) == {"f": 0.5, "i": 3, "l": [1]}


@pytest.mark.parametrize("body", [3, {"x": 1}, "text", "opaque"])
def test_http_answers_as_the_mock_server(http_url: str, body: Any) -> None:
    expected = answer(served(), body)
    response = httpx.post(http_url + "/", json=body, timeout=30)
    assert response.status_code == getattr(expected, "status_code", 200)
    assert response.json() == getattr(expected, "body", expected)


def test_a_failure_after_the_responder_keeps_its_answer(engine: str) -> None:
    fn, graph = code_flow(engine)
    graph.to(name="first", handler="(event + 1)").respond().to(name="tail", handler="fail")
    assert answer(fn, 1) == 2
