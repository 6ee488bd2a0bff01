"""VotingEnsemble and ParallelRun (docs/graphs.md#ensembles-and-parallel-runs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mlserve
from mlserve import ParallelRun, V2ModelServer, VotingEnsemble
from mlserve.graph.ensembles import ParallelRunnerModes
from tests.graph.models import Const, Echo, Labelled


class NumpyConst(V2ModelServer):
    """Defined here, in the test module: the process executor must find it too."""

    def predict(self, request: dict[str, Any]) -> Any:
        return np.full(len(request["inputs"]), self.get_param("value"))


def ensemble(values: dict[str, Any], model: type = Const, **kwargs: Any) -> mlserve.GraphServer:
    fn = mlserve.new_function("ens")
    fn.set_topology("router", class_name=VotingEnsemble(**kwargs))
    for key, value in values.items():
        fn.add_model(key, class_name=model, value=value)
    return fn.to_mock_server()


def outputs(server: mlserve.GraphServer, path: str = "/v2/models/infer", rows: int = 1) -> Any:
    return server.test(path, body={"inputs": [[0]] * rows})["outputs"]


def test_regression_weighted_mean_with_normalised_weights() -> None:
    server = ensemble({"a": 1.5, "b": 3.5, "c": 100.25}, weights={"a": 3, "b": 1})  # c gets 0
    assert outputs(server, rows=2) == [pytest.approx(2.0), pytest.approx(2.0)]
    server = ensemble({"a": 1.5, "b": 2.5})  # no weights: equal
    assert outputs(server) == [pytest.approx(2.0)]


def test_classification_weighted_vote_and_ties_to_lowest() -> None:
    server = ensemble({"a": 2, "b": 1, "c": 1}, weights={"a": 2, "b": 1, "c": 0.5})
    assert outputs(server) == [2]  # 2/3.5 beats (1+0.5)/3.5
    server = ensemble({"a": 3, "b": 1, "c": 1, "d": 3})  # 2 votes each: the lowest class
    assert outputs(server) == [1]


def test_vote_type_inferred_or_given() -> None:
    whole = ensemble({"a": 1.0, "b": 2.0, "c": 2.0})
    assert outputs(whole) == [2]  # whole numbers: a classification vote
    assert whole.graph.object._inferred_vote_type == "classification"
    forced = ensemble({"a": 1.0, "b": 2.0, "c": 2.0}, vote_type="regression")
    assert outputs(forced) == [pytest.approx(5 / 3)]


def test_paths_listing_and_pass_through() -> None:
    server = ensemble({"a": 1, "b": 3}, name="ens", weights={"a": 1, "b": 3})
    assert outputs(server, "/v2/models/ens/infer") == [3]
    assert server.test("/v2/models/a/infer", body={"inputs": [[0]]})["outputs"] == [1]
    assert server.test("/v2/models/b/infer", body={"inputs": [[0]]})["model_name"] == "b"
    assert server.test("/v2/models") == {  # weights as given (mlrun); the vote normalises
        "models": ["a", "b", "ens"],
        "weights": {"a": 1, "b": 3},
    }
    assert ensemble({"a": 1}).test("/v2/models")["weights"] is None
    assert (
        server.test("/v2/models/nope/infer", body={"inputs": [[0]]}, silent=True).status_code == 404
    )


def test_prediction_col_name() -> None:
    server = ensemble({"a": 1, "b": 1, "c": 4}, model=Labelled, prediction_col_name="prediction")
    assert outputs(server) == {"prediction": [1]}
    bad = ensemble({"a": 1}, model=Labelled, prediction_col_name="nope")
    assert bad.test("/v2/models/infer", body={"inputs": [[0]]}, silent=True).status_code == 400


def test_tensor_form_request() -> None:
    fn = mlserve.new_function("ens")
    fn.set_topology("router", class_name=VotingEnsemble(weights={"x1": 1, "x3": 1}))
    fn.add_model("x1", class_name=Echo, factor=1)
    fn.add_model("x3", class_name=Echo, factor=3)
    server = fn.to_mock_server()
    body = {"inputs": [{"name": "in", "datatype": "FP32", "shape": [2], "data": [1.5, 2.5]}]}
    out = server.test("/v2/models/infer", body=body)["outputs"]
    assert out[0]["shape"] == [2]
    assert out[0]["data"] == [pytest.approx(3.0), pytest.approx(5.0)]


def test_process_executor() -> None:
    server = ensemble({"a": 1, "b": 2, "c": 2}, executor_type="process")
    try:
        assert outputs(server, rows=3) == [2, 2, 2]
    finally:
        server.graph._object.close()


def test_instance_exports_its_class_args() -> None:
    fn = mlserve.new_function("ens")
    fn.set_topology("router", class_name=VotingEnsemble(weights={"a": 1}, vote_type="regression"))
    graph = fn.to_dict()["spec"]["graph"]
    assert graph["class_name"] == "mlserve.graph.ensembles.VotingEnsemble"
    assert graph["class_args"] == {
        "name": "VotingEnsemble",
        "vote_type": "regression",
        "weights": {"a": 1},
    }


def test_parallel_run_merges_results() -> None:
    fn = mlserve.new_function("par")
    graph = fn.set_topology("flow", engine="async")
    router = graph.to("*mlserve.ParallelRun", name="par", extend_event=True)
    router.add_route("a", handler="tests.graph.models.merge_a")
    router.add_route("b", handler="tests.graph.models.merge_b")
    router.respond()
    server = fn.to_mock_server()
    try:
        assert server.test(body={"x": 4}) == {"x": 4, "a": 5, "b": 8}
    finally:
        server.wait_for_completion()
    plain = ParallelRun(routes={})
    assert plain.to_class_args() == {} and plain.executor_type == "thread"
    with pytest.raises(ValueError, match="executor_type"):
        ParallelRun(executor_type="gpu")


def test_ensemble_in_a_sync_flow() -> None:
    fn = mlserve.new_function("flow")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="pre", handler="(dict(inputs=[[event]] * 2))").to(
        "*mlserve.VotingEnsemble", name="vote", vote_type="regression"
    ).to(name="post", handler="(event['outputs'])")
    fn.add_model("a", class_name=Const, value=1)
    fn.add_model("b", class_name=Const, value=3)
    server = fn.to_mock_server()
    assert server.test(body=7) == [pytest.approx(2.0), pytest.approx(2.0)]


class RecordingLogger:
    """Stands in for the model-log pusher (built elsewhere): keeps what is pushed."""

    def __init__(self) -> None:
        self.records: list[tuple[Any, ...]] = []

    def push(self, model: Any, *args: Any) -> None:
        self.records.append((model.name, *args))


def test_ensemble_pushes_its_own_model_log_record() -> None:
    server = ensemble({"a": 1, "b": 1})
    recorder = RecordingLogger()
    server.graph._object.model_logger = recorder
    outputs(server)
    [(name, _start, request, response, op, microsec, metrics)] = recorder.records
    assert (name, op, metrics) == ("VotingEnsemble", "infer", {})
    assert request["inputs"] == [[0]] and response["outputs"] == [1] and microsec >= 0


def test_the_executor_ends_with_the_server() -> None:
    fn = mlserve.new_function("ens-close")
    fn.set_topology("router", class_name=VotingEnsemble(vote_type="regression"))
    fn.add_model("a", class_name=Const, value=1)
    fn.add_model("b", class_name=Const, value=3)
    server = fn.to_mock_server()
    assert outputs(server) == [2]
    live = server.graph.object
    assert live._executor is not None
    server.wait_for_completion()
    assert live._executor is None


# ---- mlrun's ParallelRunnerModes, metadata and outputs ----


@pytest.mark.parametrize("mode", ParallelRunnerModes.all())
def test_every_executor_mode_votes_alike(mode: ParallelRunnerModes) -> None:
    server = ensemble({"a": 1, "b": 2, "c": 2}, model=NumpyConst, executor_type=mode)
    try:
        assert outputs(server, rows=2) == [2, 2]  # numpy outputs are votes, not a 400
        assert outputs(server, "/v2/models/a/infer") == [1]
    finally:
        server.wait_for_completion()


def test_array_mode_runs_in_the_callers_thread() -> None:
    server = ensemble({"a": 1, "b": 3}, executor_type="array", vote_type="regression")
    assert outputs(server) == [2]
    assert server.graph.object._executor is None  # no pool was started
    assert server.graph.object.to_class_args()["executor_type"] == "array"


def test_an_unknown_executor_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="executor_type must be one of"):
        VotingEnsemble(executor_type="gpu")


def test_ensemble_metadata_is_mlruns() -> None:
    server = ensemble({"a": 1, "b": 2}, version="v3")
    assert server.test("/v2/models/VotingEnsemble") == {
        "name": "VotingEnsemble",
        "version": "v3",
        "inputs": [],
        "outputs": [],
    }
    assert server.test("/v2/models/a") == {"name": "a", "version": "", "inputs": [], "outputs": []}
    answer = server.test("/v2/models/infer", body={"inputs": [[0]]})
    assert answer["model_version"] == "v3"


def test_the_flag_keys_the_vote_by_prediction_col_name() -> None:
    server = ensemble(
        {"a": 1, "b": 1}, format_response_with_col_name_flag=True, prediction_col_name="p"
    )
    assert outputs(server) == {"p": [1]}


def doubled(event: Any) -> dict[str, Any]:
    """A handler route defined in the test module (found by the process executor too)."""
    return {"double": event["x"] * 2}


@pytest.mark.parametrize("mode", ParallelRunnerModes.all())
def test_parallel_run_of_module_classes_and_handlers(mode: ParallelRunnerModes) -> None:
    fn = mlserve.new_function("par-modes")
    graph = fn.set_topology("router", ParallelRun(extend_event=True, executor_type=mode))
    graph.add_route("h", handler="doubled")
    graph.add_route("c", class_name="NumpyConst", value=3)
    server = fn.to_mock_server()
    try:
        answer = server.test(body={"x": 4, "inputs": [[0]]})
    finally:
        server.wait_for_completion()
    assert answer["x"] == 4 and answer["double"] == 8 and answer["outputs"] == [3]
