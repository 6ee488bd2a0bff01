"""Weighted routes in the mock server: the split, the description, run-time changes."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import chisquare

import mlserve
from mlserve.graph.steps import step_from_dict
from mlserve.graph.traffic import TrafficSplit, Variants, parse_weights
from mlserve.protocol.errors import InvalidInput
from mlserve.repository.config import load_config
from mlserve.server.graph_server import ServingRequestError
from tests.fixtures import Multiplier


def _function(**router: Any) -> mlserve.ServingFunction:
    fn = mlserve.new_function("rollout")
    if router:
        fn.set_topology("router", **router)
    fn.add_model("m:v1", class_name=Multiplier, multiplier=1, weight=90)
    fn.add_model("m:v2", class_name=Multiplier, multiplier=2, weight=10)
    return fn


def _route(server: mlserve.GraphServer, **kwargs: Any) -> str:
    answer = server.test("/v2/models/m/infer", {"inputs": [1]}, **kwargs)
    route: str = answer["parameters"]["route"]
    assert answer["model_version"] == route.partition(":")[2]
    return route


def test_split_of_ten_thousand_calls_passes_a_chi_square_test() -> None:
    server = _function().to_mock_server()
    counts = Counter(_route(server) for _ in range(10_000))
    observed = [counts["m:v1"], counts["m:v2"]]
    assert sum(observed) == 10_000
    assert chisquare(observed, [9_000, 1_000]).pvalue > 0.01, observed
    split = server.graph.object.traffic  # type: ignore[union-attr]
    assert split.stats["m:v1"].requests == counts["m:v1"]
    assert split.stats["m:v2"].requests == counts["m:v2"]


def test_a_call_naming_a_version_reaches_that_version() -> None:
    server = _function().to_mock_server()
    for _ in range(20):
        answer = server.test("/v2/models/m/versions/v2/infer", {"inputs": [1]})
        assert answer["outputs"] == [2] and answer["model_version"] == "v2"


def test_a_zero_weight_takes_a_variant_out_of_the_split() -> None:
    fn = mlserve.new_function("rollout")
    fn.add_model("m:v1", class_name=Multiplier, multiplier=1, weight=1)
    fn.add_model("m:v2", class_name=Multiplier, multiplier=2, weight=0)
    server = fn.to_mock_server()
    assert {_route(server) for _ in range(200)} == {"m:v1"}


def test_weight_on_a_route_without_a_version_says_how_to_name_variants() -> None:
    fn = mlserve.new_function("rollout")
    with pytest.raises(ValueError, match="m:<variant>"):
        fn.add_model("m", class_name=Multiplier, weight=90)
    fn.add_model("m:v1", class_name=Multiplier, weight=90)
    with pytest.raises(ValueError, match="added twice"):
        fn.add_model("m:v1", class_name=Multiplier, weight=10)
    with pytest.raises(ValueError, match="0 or more"):
        fn.add_model("m:v2", class_name=Multiplier, weight=-1)
    with pytest.raises(ValueError, match="shadow"):
        fn.add_model("m:v3", class_name=Multiplier, weight=1, shadow=True)


def test_the_description_carries_the_weights() -> None:
    fn = _function(route_key="parameters.user")
    struct = fn.spec.graph.to_dict()  # type: ignore[union-attr]
    assert struct["routes"]["m:v1"]["weight"] == 90
    assert struct["routes"]["m:v2"]["weight"] == 10
    assert struct["class_args"]["route_key"] == "parameters.user"
    rebuilt = step_from_dict(struct)
    assert rebuilt.to_dict() == struct
    assert fn.spec.graph.set_weights("m", {"v2": 30}) == {"m:v1": 90, "m:v2": 30}  # type: ignore[union-attr]
    server = fn.to_mock_server()
    assert server.graph.object.traffic.weights() == {"m": {"m:v1": 90, "m:v2": 30}}  # type: ignore[union-attr]


def test_export_and_build_carry_the_weights(tmp_path: Path) -> None:
    fn = _function()
    path = tmp_path / "fn.yaml"
    fn.export(str(path))
    assert "weight: 90" in path.read_text() and "weight: 10" in path.read_text()
    again = mlserve.import_function(str(path))
    assert again.spec.graph.to_dict() == fn.spec.graph.to_dict()  # type: ignore[union-attr]


def test_weights_change_while_serving_and_the_description_follows() -> None:
    server = _function().to_mock_server()
    router = server.graph
    assert router.set_weights("m", {"v1": 0, "v2": 1}) == {"m:v1": 0, "m:v2": 1}  # type: ignore[union-attr]
    assert {_route(server) for _ in range(100)} == {"m:v2"}
    assert router.to_dict()["routes"]["m:v1"]["weight"] == 0  # type: ignore[union-attr]
    with pytest.raises(InvalidInput, match="no variant 'v9'"):
        router.set_weights("m", {"v9": 1})  # type: ignore[union-attr]
    with pytest.raises(InvalidInput, match="above 0"):
        router.set_weights("m", {"v2": 0})  # type: ignore[union-attr]
    assert {_route(server) for _ in range(50)} == {"m:v2"}  # a refused change changes nothing


def test_a_weight_change_never_fails_a_call_in_flight() -> None:
    server = _function().to_mock_server()
    router = server.graph
    failures: list[BaseException] = []
    stop = threading.Event()

    def call() -> None:
        while not stop.is_set():
            try:
                _route(server)
            except BaseException as exc:  # any failure is the test's failure
                failures.append(exc)

    callers = [threading.Thread(target=call) for _ in range(4)]
    for thread in callers:
        thread.start()
    for i in range(300):
        router.set_weights("m", {"v1": i % 3, "v2": 1 + i % 2})  # type: ignore[union-attr]
    stop.set()
    for thread in callers:
        thread.join()
    assert failures == []


def test_weights_are_checked() -> None:
    assert parse_weights("m", {"v1": 1, "m:v2": 2.5}) == {"m:v1": 1.0, "m:v2": 2.5}
    for bad, message in [
        ({}, "object"),
        ({"v1": "x"}, "number"),
        ({"v1": True}, "number"),
        ({"v1": float("nan")}, "0 or more"),
        ({"other:v1": 1}, "not a variant"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            parse_weights("m", bad)
    with pytest.raises(InvalidInput, match="above 0"):
        Variants.of("m", {"m:v1": 0})


def test_a_split_table_is_replaced_never_changed() -> None:
    split = TrafficSplit()
    split.declare({"m": {"m:v1": 1, "m:v2": 1}}, {})
    before = split.table
    split.set_weights("m", {"v2": 3})
    assert before["m"].weights == (1.0, 1.0)  # a request holding the old table keeps it
    assert split.table["m"].weights == (1.0, 3.0)
    split.declare({"m": {"m:v1": 1, "m:v2": 1}}, {})  # routes declared again (a load)
    assert split.table["m"].weights == (1.0, 3.0)  # the run-time change stays on top


def test_repository_versions_take_weights_from_the_config(tmp_path: Path) -> None:
    for version in (1, 2):
        folder = tmp_path / "repo" / "m" / str(version)
        folder.mkdir(parents=True)
        (folder / "model.txt").write_text(str(version))
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n"
        "  - name: m\n"
        "    class_name: tests.fixtures.Multiplier\n"
        "    version_policy: all\n"
        "    weights: {1: 3, 2: 1}\n"
    )
    fn = mlserve.new_function("repo")
    fn.set_topology(
        "router",
        class_name="mlserve.repository.router.RepositoryRouter",
        repository=str(tmp_path / "repo"),
        model_config=str(config),
    )
    server = fn.to_mock_server()
    counts = Counter(_route(server) for _ in range(4_000))
    assert set(counts) == {"m:1", "m:2"}
    assert chisquare([counts["m:1"], counts["m:2"]], [3_000, 1_000]).pvalue > 0.01, counts
    answer = server.test("/v2/models/m/versions/1/infer", {"inputs": [1]})
    assert answer["model_version"] == "1"
    bad = tmp_path / "bad.yaml"
    bad.write_text(config.read_text().replace("weights: {1: 3, 2: 1}", "weights: {1: x}"))
    with pytest.raises(ValueError, match="weight of version 1"):
        load_config(bad)


def test_a_weights_call_needs_model_control() -> None:
    server = _function().to_mock_server()
    with pytest.raises(ServingRequestError) as refused:
        server.test("/v2/repository/models/m/weights", {"weights": {"v2": 50}})
    assert refused.value.status_code == 403
    assert "model-control-mode" in str(refused.value)


def test_weights_calls_and_the_traffic_view() -> None:
    server = _function().to_mock_server(model_control=True)
    answer = server.test("/v2/repository/models/m/weights", {"weights": {"v2": 90}})
    assert answer["weights"] == {"m:v1": 90.0, "m:v2": 90.0}
    config = json.dumps({"weights": {"v1": 10}})
    load = server.test("/v2/repository/models/m/load", {"parameters": {"config": config}})
    assert load["weights"] == {"m:v1": 10.0, "m:v2": 90.0}  # a load that only sets weights
    by_parameter = {"parameters": {"weights": json.dumps({"v1": 30})}}
    assert server.test("/v2/repository/models/m/load", by_parameter)["weights"]["m:v1"] == 30
    _route(server)
    traffic = server.test("/v2/models/m/traffic")
    assert sum(stats["requests"] for stats in traffic["stats"].values()) == 1
    for body, status in [
        ({}, 400),
        ({"weights": "not json"}, 400),
        ({"weights": {"v2": -1}}, 400),
        ({"weights": {"v1": 0, "v2": 0}}, 400),
    ]:
        with pytest.raises(ServingRequestError) as refused:
            server.test("/v2/repository/models/m/weights", body)
        assert refused.value.status_code == status, body
    with pytest.raises(ServingRequestError) as missing:
        server.test("/v2/repository/models/nope/weights", {"weights": {"v1": 1}})
    assert missing.value.status_code == 404
    assert server.test("/v2/models/m/traffic")["weights"] == {"m:v1": 30.0, "m:v2": 90.0}
