"""ModelRouter: every row of the URL table (docs/serving.md#the-url-surface), through
``server.test()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import mlserve
from mlserve.graph.routers import EXTENSIONS, highest_version, sorted_versions
from mlserve.graph.steps import MAX_ROUTES, RouterStep
from mlserve.protocol.errors import InvalidInput
from mlserve.repository.router import RepositoryRouter
from tests.fixtures import FailingLoad, GatedLoad, ImageSize, Multiplier, model_of, serve

ROUTER_METADATA = {"name": "ModelRouter", "version": "v2", "extensions": list(EXTENSIONS)}


@pytest.fixture(scope="module")
def server() -> mlserve.GraphServer:
    """m1 (x1), m2 (x2), m3:v1 (x31), m3:v2 (x32)."""
    return serve(
        {
            "m1": (Multiplier, {"multiplier": 1}),
            "m2": (Multiplier, {"multiplier": 2}),
            "m3:v1": (Multiplier, {"multiplier": 31}),
            "m3:v2": (Multiplier, {"multiplier": 32}),
        }
    )


def _call(server: mlserve.GraphServer, path: str, body: Any = None, method: str = "") -> Any:
    return server.test(path, body=body, method=method, silent=True)


# ---- metadata, health, listing ----


@pytest.mark.parametrize("path", ["/", "", "/v2/health", "/v2/health/"])
def test_get_root_and_health_give_router_metadata(server: mlserve.GraphServer, path: str) -> None:
    assert server.test(path, method="GET") == ROUTER_METADATA


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/live/"])
def test_liveness(server: mlserve.GraphServer, path: str) -> None:
    assert server.test(path) == {"live": True}


def test_readiness_when_all_models_are_ready(server: mlserve.GraphServer) -> None:
    assert server.test("/v2/health/ready") == {"ready": True}


@pytest.mark.parametrize("router", [None, "VotingEnsemble", "ParallelRun"])
def test_a_router_or_ensemble_without_models_refuses_to_start(router: str | None) -> None:
    fn = mlserve.new_function("empty")
    fn.set_topology("router", class_name=router)
    with pytest.raises(ValueError, match="has no models to route to: add them with fn.add_model"):
        fn.to_mock_server()


def test_readiness_is_503_when_one_model_is_not_ready() -> None:
    answer = _call(serve({"ok": Multiplier, "bad": FailingLoad}), "/v2/health/ready")
    assert (answer.status_code, answer.body) == (503, {"ready": False})


def test_readiness_follows_an_async_load() -> None:
    gate = GatedLoad.gate("router-ready")
    server = serve({"m": (GatedLoad, {"gate": "router-ready"})}, spec={"load_mode": "async"})
    assert _call(server, "/v2/health/ready").status_code == 503
    assert server.test("/v2/health/live") == {"live": True}
    gate.set()
    assert model_of(server, "m")._loaded.wait(10)
    assert server.test("/v2/health/ready") == {"ready": True}


def test_server_metadata(server: mlserve.GraphServer) -> None:
    answer = server.test("/v2")
    assert answer == {
        "name": "mlserve",
        "version": mlserve.__version__,
        "extensions": list(EXTENSIONS),
    }
    assert server.test("/v2/") == answer


@pytest.mark.parametrize("path", ["/v2/models", "/v2/models/"])
def test_listing(server: mlserve.GraphServer, path: str) -> None:
    assert server.test(path) == {"models": ["m1", "m2", "m3:v1", "m3:v2"]}


def test_listing_keeps_the_order_models_were_added() -> None:
    assert serve({"z": Multiplier, "a": Multiplier}).test("/v2/models") == {"models": ["z", "a"]}


# ---- model metadata and readiness ----


@pytest.mark.parametrize(
    ("path", "name", "version"),
    [
        ("/v2/models/m1", "m1", ""),
        ("/v2/models/m1/", "m1", ""),
        ("/v2/models/m3/versions/v1", "m3", "v1"),
        ("/v2/models/m3/versions/v2", "m3", "v2"),
        ("/v2/models/m3:v1", "m3", "v1"),
        ("/v2/models/m3", "m3", "v2"),  # the highest version
    ],
)
def test_model_metadata(server: mlserve.GraphServer, path: str, name: str, version: str) -> None:
    # mlrun's keys; named versions and an empty platform add nothing (see below)
    assert server.test(path) == {"name": name, "version": version, "inputs": [], "outputs": []}


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v2/models/m1/ready", "m1"),
        ("/v2/models/m3/versions/v1/ready", "m3"),
        ("/v2/models/m3/ready", "m3"),
        ("/v2/models/m3:v2/ready", "m3"),
    ],
)
def test_model_ready(server: mlserve.GraphServer, path: str, name: str) -> None:
    answer = server.test(path)  # the body, carrying the model's status (as mlrun's Response)
    assert answer == {"name": name, "ready": True} and answer.status_code == 200
    assert server.test(path, get_body=False).status_code == 200


def test_model_not_ready_is_503() -> None:
    answer = _call(serve({"bad": FailingLoad}), "/v2/models/bad/ready")
    assert (answer.status_code, answer.body) == (503, {"name": "bad", "ready": False})


# ---- inference routes ----


@pytest.mark.parametrize(
    ("path", "outputs", "model_name", "model_version"),
    [
        ("/v2/models/m1/infer", [5], "m1", None),
        ("/v2/models/m2/infer", [10], "m2", None),
        ("/v2/models/m2/predict", [10], "m2", None),
        ("/v2/models/m2", [10], "m2", None),
        ("/v2/models/m2/", [10], "m2", None),
        ("/v2/models/m3/versions/v1/infer", [155], "m3", "v1"),
        ("/v2/models/m3/versions/v2/infer", [160], "m3", "v2"),
        ("/v2/models/m3/versions/v1/predict", [155], "m3", "v1"),
        ("/v2/models/m3/versions/v1", [155], "m3", "v1"),
        ("/v2/models/m3:v1/infer", [155], "m3", "v1"),
        ("/v2/models/m3:v2", [160], "m3", "v2"),
        ("/v2/models/m3/infer", [160], "m3", "v2"),  # unversioned name: highest version
        ("/v2/models/m3", [160], "m3", "v2"),
    ],
)
def test_infer_routes(
    server: mlserve.GraphServer,
    path: str,
    outputs: list[int],
    model_name: str,
    model_version: str | None,
) -> None:
    answer = server.test(path, body={"inputs": [5]})
    assert answer["outputs"] == outputs
    assert answer["model_name"] == model_name
    assert answer.get("model_version") == model_version
    assert "timestamp" in answer


@pytest.mark.parametrize(
    ("path", "multiplier"),
    [
        ("/v2/models/m1/explain", 1),
        ("/v2/models/m3/versions/v1/explain", 31),
        ("/v2/models/m3/explain", 32),
    ],
)
def test_explain_routes(server: mlserve.GraphServer, path: str, multiplier: int) -> None:
    answer = server.test(path, body={"inputs": [1, 2]})
    assert answer["outputs"] == {"multiplier": multiplier, "count": 2}
    assert "timestamp" not in answer


@pytest.mark.parametrize(
    "path", ["/v2/models/m2/double", "/v2/models/m3/versions/v1/double", "/v2/models/m3:v2/double"]
)
def test_custom_op_routes(server: mlserve.GraphServer, path: str) -> None:
    assert server.test(path, body={"inputs": [4]}) == {"doubled": [8]}


# ---- stream form ----


@pytest.mark.parametrize(
    ("body", "outputs", "model_name"),
    [
        ({"inputs": [1]}, [1], "m1"),  # no model: the first route
        ({"model": "m2", "inputs": [1]}, [2], "m2"),
        ({"model": "m3:v1", "inputs": [1]}, [31], "m3"),
        ({"model": "m3", "inputs": [1]}, [32], "m3"),
        ({"model": "m2", "operation": "infer", "inputs": [1]}, [2], "m2"),
        ({"model": "m2", "operation": "predict", "inputs": [1]}, [2], "m2"),
    ],
)
def test_stream_form_on_root(
    server: mlserve.GraphServer, body: dict[str, Any], outputs: list[int], model_name: str
) -> None:
    answer = server.test("/", body=body)
    assert answer["outputs"] == outputs
    assert answer["model_name"] == model_name


def test_stream_form_operations(server: mlserve.GraphServer) -> None:
    explained = server.test("/", body={"model": "m3:v1", "operation": "explain", "inputs": [1]})
    assert explained["outputs"] == {"multiplier": 31, "count": 1}
    assert server.test("/", body={"model": "m2", "operation": "double", "inputs": [3]}) == {
        "doubled": [6]
    }


def test_stream_form_body_id(server: mlserve.GraphServer) -> None:
    assert server.test("/", body={"model": "m1", "id": "s1", "inputs": [1]})["id"] == "s1"


def test_stream_form_unknown_model_is_404(server: mlserve.GraphServer) -> None:
    answer = _call(server, "/", body={"model": "nope", "inputs": [1]})
    assert answer.status_code == 404
    # no names (docs/security.md#errors-without-leaks)
    assert answer.body == {
        "error": "Request for unknown model: 'nope' is not found (ModelNotFound)"
    }


def test_stream_form_illegal_operation_is_400(server: mlserve.GraphServer) -> None:
    answer = _call(server, "/", body={"model": "m1", "operation": "nope", "inputs": [1]})
    assert answer.status_code == 400
    assert answer.body["error"].startswith("IllegalOperation: illegal model operation 'nope'")


def test_stream_form_from_a_json_string_body(server: mlserve.GraphServer) -> None:
    answer = server.test("/", body='{"model": "m2", "inputs": [2]}')
    assert answer["outputs"] == [4]
    answer = server.test(
        "/", body=b'{"model": "m3:v1", "inputs": [1]}', content_type="application/json"
    )
    assert answer["outputs"] == [31]


# ---- highest version ----


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (["m:1", "m:2", "m:10"], "m:10"),  # numeric order, not string order
        (["m:9", "m:10", "m:100"], "m:100"),
        (["m:v1", "m:v2", "m:v10"], "m:v2"),  # string order when not all are numbers
        (["m:1", "m:v1"], "m:v1"),
        (["m:a", "m:b"], "m:b"),
        (["m:3"], "m:3"),
    ],
)
def test_unversioned_name_resolves_to_the_highest_version(keys: list[str], expected: str) -> None:
    server = serve({key: (Multiplier, {"multiplier": i + 1}) for i, key in enumerate(keys)})
    version = expected.partition(":")[2]
    answer = server.test("/v2/models/m/infer", body={"inputs": [1]})
    assert answer["model_version"] == version
    assert answer["outputs"] == [keys.index(expected) + 1]
    assert server.test("/v2/models/m")["version"] == version


def test_an_unversioned_key_is_used_as_is_beside_versions() -> None:
    server = serve({"m": (Multiplier, {"multiplier": 5}), "m:9": (Multiplier, {"multiplier": 9})})
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [5]
    assert server.test("/v2/models/m/versions/9/infer", body={"inputs": [1]})["outputs"] == [9]


@pytest.mark.parametrize(
    ("versions", "highest", "ordered"),
    [
        (["1", "10", "2"], "10", ["1", "2", "10"]),
        (["b", "a", "c"], "c", ["a", "b", "c"]),
        (["v10", "v2"], "v2", ["v10", "v2"]),
    ],
)
def test_version_order_helpers(versions: list[str], highest: str, ordered: list[str]) -> None:
    assert highest_version(versions) == highest
    assert sorted_versions(versions) == ordered


def test_models_learn_their_sibling_versions_in_numeric_order() -> None:
    server = serve({"m:10": Multiplier, "m:2": Multiplier, "other": Multiplier})
    assert server.test("/v2/models/m/versions/2")["versions"] == ["2", "10"]
    assert "versions" not in server.test("/v2/models/other")  # unversioned: mlrun's keys only


# ---- errors ----


@pytest.mark.parametrize(
    ("path", "method", "status", "error"),
    [
        (
            "/v2/models/nope/infer",
            "POST",
            404,
            "Request for unknown model: 'nope' is not found (ModelNotFound)",
        ),
        (
            "/v2/models/nope",
            "GET",
            404,
            "Request for unknown model: 'nope' is not found (ModelNotFound)",
        ),
        (
            "/v2/models/m3/versions/v9/infer",
            "POST",
            404,
            "Request for unknown model: 'm3' version v9 is not found (ModelNotFound)",
        ),
        (
            "/v2/models/m1/versions/v1",
            "GET",
            404,
            "Request for unknown model: 'm1' version v1 is not found (ModelNotFound)",
        ),
        (
            "/v2/models/nope/ready",
            "GET",
            404,
            "Request for unknown model: 'nope' is not found (ModelNotFound)",
        ),
        (
            "/nowhere",
            "GET",
            404,
            "ModelNotFound: illegal path /nowhere, must start with /v2/models",
        ),
        (
            "/nowhere",
            "POST",
            404,
            "ModelNotFound: illegal path /nowhere, must start with /v2/models",
        ),
        (
            "/v1/models/m1/infer",
            "POST",
            404,
            # /v1 belongs to the TF Serving API, which has no "infer" verb
            "ModelNotFound: illegal path /v1/models/m1/infer",
        ),
        (
            "/v2/modelsx",
            "GET",
            404,
            "ModelNotFound: illegal path /v2/modelsx, must start with /v2/models",
        ),
        ("/v2/health/other", "GET", 404, "ModelNotFound: unknown health path /v2/health/other"),
        (
            "/v2/models/m1/nope",
            "POST",
            400,
            "IllegalOperation: illegal model operation 'nope', method=POST",
        ),
        (
            "/v2/models/m3/versions/v1/nope",
            "POST",
            400,
            "IllegalOperation: illegal model operation 'nope', method=POST",
        ),
    ],
)
def test_errors_have_status_and_json_body(
    server: mlserve.GraphServer, path: str, method: str, status: int, error: str
) -> None:
    answer = _call(server, path, body={"inputs": [1]} if method == "POST" else None, method=method)
    assert (answer.status_code, answer.body) == (status, {"error": error})
    raw = server.test(
        path,
        body={"inputs": [1]} if method == "POST" else None,
        method=method,
        silent=True,
        get_body=False,
    )
    assert raw.status_code == status
    assert raw.content_type == "application/json"
    assert mlserve.protocol.tensors.loads(raw.body) == {"error": error}


def test_stream_form_without_models_is_404(tmp_path: Path) -> None:
    fn = mlserve.new_function("empty")  # a repository's router may start empty
    fn.set_topology("router", class_name=RepositoryRouter, repository=str(tmp_path))
    answer = fn.to_mock_server().test("/", body={"inputs": [1]}, silent=True)
    assert (answer.status_code, answer.body) == (
        404,
        {"error": "ModelNotFound: no models are served"},
    )


def test_a_failing_request_leaves_the_router_serving(server: mlserve.GraphServer) -> None:
    for _ in range(3):
        assert _call(server, "/v2/models/nope/infer", body={"inputs": [1]}).status_code == 404
        assert _call(server, "/v2/models/m1/infer", body={"inputs": "x"}).status_code == 400
    assert server.test("/v2/models/m1/infer", body={"inputs": [1]})["outputs"] == [1]


# ---- image bodies ----


@pytest.mark.parametrize("content_type", ["image/png", "image/jpeg", "image/png; q=1"])
def test_image_body_becomes_inputs_of_bytes(content_type: str) -> None:
    server = serve({"img": ImageSize})
    data = bytes(range(256)) * 3
    answer = server.test("/v2/models/img/infer", body=data, content_type=content_type)
    assert answer["outputs"] == ["bytes", 768]


def test_image_body_in_the_stream_form_goes_to_the_first_route() -> None:
    server = serve({"img": ImageSize, "other": Multiplier})
    answer = server.test("/", body=b"\x89PNG\r\n", content_type="image/png")
    assert answer["outputs"] == ["bytes", 6]


# ---- limits ----


def test_max_routes_is_4500_and_more_is_a_clear_error() -> None:
    assert MAX_ROUTES == 4500
    router = RouterStep()
    for i in range(MAX_ROUTES):
        router.add_route(f"m{i}", class_name=Multiplier)
    assert len(router.routes) == MAX_ROUTES
    router.add_route("m0", class_name=Multiplier)  # replacing a route is not one more
    with pytest.raises(InvalidInput, match="at most 4500 routes"):
        router.add_route("one-too-many", class_name=Multiplier)


def test_max_routes_through_add_model() -> None:
    fn = mlserve.new_function("big")
    for i in range(MAX_ROUTES):
        fn.add_model(f"m{i}", class_name=Multiplier)
    with pytest.raises(InvalidInput, match="4500"):
        fn.add_model("extra", class_name=Multiplier)


# ---- the router object itself ----


def test_router_do_event_synchronously(server: mlserve.GraphServer) -> None:
    router = server.graph.object  # type: ignore[union-attr]
    event = router.do_event(mlserve.Event(body={"inputs": [2]}, path="/v2/models/m2/infer"))
    assert event.body["outputs"] == [4]
    event = router.do_event(mlserve.Event(path="/v2/models"))
    assert event.body == {"models": ["m1", "m2", "m3:v1", "m3:v2"]}


def test_custom_router_class_by_name_and_class() -> None:
    class Prefixed(mlserve.ModelRouter):
        def postprocess(self, event: mlserve.Event) -> mlserve.Event:
            if isinstance(event.body, dict):
                event.body["routed_by"] = "Prefixed"
            return event

    for class_name in (Prefixed, "Prefixed"):
        fn = mlserve.new_function("custom")
        fn.set_topology("router", class_name=class_name)
        fn.add_model("m", class_name=Multiplier)
        server = fn.to_mock_server(namespace={"Prefixed": Prefixed})
        assert server.test("/v2/models/m/infer", body={"inputs": [1]})["routed_by"] == "Prefixed"
        assert server.test("/")["name"] == "Prefixed"
