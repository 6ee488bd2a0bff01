"""mlrun APIs that code moved over from mlrun calls, behaving as mlrun's ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mlserve
from mlserve.graph.steps import MAX_ROUTES
from mlserve.protocol.errors import InvalidInput
from tests.fixtures import Multiplier


class PathModel(mlserve.V2ModelServer):
    """Fails to load without the model path it was added with."""

    def load(self) -> None:
        self.model = len(Path(self.model_path).name)

    def predict(self, request: dict[str, Any]) -> list[Any]:
        return [self.model * self.get_param("multiplier", 1)]


def test_model_to_dict_is_mlruns_step_description() -> None:
    model = mlserve.V2ModelServer(name="ms", model_path="./xx", multiplier=7)
    assert model.to_dict() == {
        "class_args": {"model_path": "./xx", "multiplier": 7, "protocol": "v2"},
        "class_name": "mlserve.model.V2ModelServer",
        "name": "ms",
    }
    routed = Multiplier(name="m:2", input_path="req", multiplier=2)
    assert routed.to_dict() == {
        "class_name": "tests.fixtures.Multiplier",
        "name": "m:2",
        "input_path": "req",
        "class_args": {"protocol": "v2", "multiplier": 2},
    }


def test_add_model_keeps_the_path_of_an_instance(tmp_path: Path) -> None:
    fn = mlserve.new_function("f")
    fn.set_topology("router")
    fn.add_model("my", str(tmp_path / "abcd"), class_name=PathModel(multiplier=10))
    server = fn.to_mock_server()
    assert server.test("/v2/models/my/infer", body={"inputs": [1]})["outputs"] == [40]


def test_a_router_instance_is_its_description() -> None:
    fn = mlserve.new_function("f")
    ensemble = mlserve.VotingEnsemble(weights={"a": 1, "b": 1}, vote_type="regression")
    graph = fn.set_topology("router", ensemble)
    fn.add_model("a", class_name=Multiplier, multiplier=1)
    fn.add_model("b", class_name=Multiplier, multiplier=3)
    assert fn.to_mock_server().test("/v2/models")["weights"] == {"a": 1, "b": 1}
    graph.class_args["weights"] = {"a": 3, "b": 1}  # changed after set_topology: it holds
    server = fn.to_mock_server()
    assert server.test("/v2/models")["weights"] == {"a": 3, "b": 1}
    assert server.test("/v2/models/infer", body={"inputs": [4]})["outputs"] == [4 * 1.5]


def test_new_function_with_a_command_file(tmp_path: Path) -> None:
    code = tmp_path / "myfunc.py"
    code.write_text(
        "class MyCls:\n    def do(self, x):\n        return x * 2\n\n"
        "def myhand(x):\n    return x * 2\n"
    )
    fn = mlserve.new_function("test2", command=str(code), kind="serving")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="s1", class_name="MyCls").to(name="s2", handler="myhand")
    assert fn.to_mock_server().test(body=5) == 20
    assert fn.to_dict()["spec"]["filename"] == str(code)


def test_deploy_refuses_an_undeclared_child_function() -> None:
    fn = mlserve.new_function("tests")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="s1", handler="(event)").to(name="s2", handler="(event)", function="child")
    with pytest.raises(ValueError, match=r"function child is used in steps and is not defined"):
        fn.deploy()
    assert fn._deployment is None


def test_deploy_function_mock_serves_in_process() -> None:
    fn = mlserve.new_function("tests")
    fn.add_model("m1", class_name=Multiplier, multiplier=3)
    assert mlserve.deploy_function(fn, mock=True) == ""
    assert fn.invoke("/v2/models/m1/infer", {"inputs": [2]})["outputs"] == [6]
    assert fn.invoke("/v2/models/m1") == {"name": "m1", "version": "", "inputs": [], "outputs": []}
    with pytest.raises(
        RuntimeError,
        match=r"^failed \(404\): \{\"error\": \"Request for unknown model.*ModelNotFound",
    ):
        fn.invoke("/v2/models/nope/infer", {"inputs": [2]})
    fn.stop()
    with pytest.raises(RuntimeError, match="not deployed"):
        fn.invoke("/v2/models/m1/infer", {"inputs": [2]})


def test_test_raises_with_the_status_and_the_body_text() -> None:
    fn = mlserve.new_function("tests")
    fn.add_model("m1", class_name=Multiplier)
    server = fn.to_mock_server()
    with pytest.raises(RuntimeError) as info:
        server.test("/v2/models/m1/nope", {"inputs": [1]})
    assert str(info.value).startswith('failed (400): {"error": "IllegalOperation: ')
    assert info.value.body["error"].startswith("IllegalOperation")  # type: ignore[attr-defined]


def test_the_route_limit_is_a_value_error_and_a_400() -> None:
    router = mlserve.RouterStep()
    for key in range(MAX_ROUTES):
        router.add_route(f"r{key}", class_name=Multiplier)
    with pytest.raises(ValueError, match="at most") as info:
        router.add_route("one-too-many", class_name=Multiplier)
    assert isinstance(info.value, InvalidInput) and info.value.status_code == 400


def test_context_stream_shows_the_dummy_streams_events() -> None:
    fn = mlserve.new_function("tests")
    fn.add_model("my", ".", class_name=Multiplier(multiplier=100))
    fn.set_tracking("dummy://fidelity-stream")
    server = fn.to_mock_server()
    assert server.context.stream.enabled
    server.test("/v2/models/my/infer", '{"inputs": [5]}')
    events = server.context.stream.output_stream.event_list
    assert len(events) == 1 and events[0]["model"] == "my"
    untracked = mlserve.new_function("plain")
    untracked.add_model("my", class_name=Multiplier)
    stream = untracked.to_mock_server().context.stream
    assert not stream.enabled and stream.output_stream is None
    server.wait_for_completion()


def test_a_model_steps_ready_answer_carries_its_status() -> None:
    fn = mlserve.new_function("tests")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(Multiplier(name="my2", multiplier=100)).respond()
    server = fn.to_mock_server()
    ready = server.test("/ready", method="GET")  # mlrun code reads the status, mlserve the body
    assert ready.status_code == 200 and ready.content_type == "application/json"
    assert ready == ready.body == {"name": "my2", "ready": True}
    assert server.test("/", body={"inputs": [5]})["outputs"] == [500]


def test_endpoint_records_carry_feature_and_label_names(tmp_path: Path) -> None:
    from mlserve.monitoring.endpoints import endpoint_uid
    from mlserve.monitoring.stores import open_store
    from tests.fixtures import Declared

    url = f"sqlite:///{tmp_path / 'endpoints.db'}"
    fn = mlserve.new_function("fn", project="names")
    fn.set_topology("router", mlserve.VotingEnsemble(vote_type="regression"))
    fn.add_model("d", class_name=Declared)
    fn.add_model("m", class_name=Multiplier)
    fn.spec.parameters.update(endpoint_store_url=url, endpoint_flush_seconds=600)
    fn.set_tracking("dummy://names")
    server = fn.to_graph_server()
    server.init_states(namespace={})
    server.init_object({})
    server.wait_for_completion()
    endpoints = {e.spec.model: e for e in open_store(url).list("names")}
    assert sorted(endpoints) == ["VotingEnsemble:v1", "d:latest", "m:latest"]  # mlrun's names
    declared = endpoints["d:latest"]
    assert (declared.spec.feature_names, declared.spec.label_names) == (
        ["features", "mask"],
        ["score"],
    )
    assert endpoints["m:latest"].spec.feature_names == []
    assert endpoints["m:latest"].metadata.uid == endpoint_uid("names", "fn", "", "m", "latest")
