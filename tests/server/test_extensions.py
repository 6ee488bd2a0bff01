"""Server-level REST extensions, in-process: the mock server and the ASGI face agree."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client import Counter

import mlserve
from mlserve.http.app import create_app
from mlserve.monitoring.metrics import REGISTRY


class Doubler(mlserve.V2ModelServer):
    def load(self) -> None:
        self.inputs = [{"name": "x", "datatype": "INT64", "shape": [-1]}]
        self.outputs = [{"name": "y", "datatype": "INT64", "shape": [-1]}]

    def predict(self, request: dict[str, Any]) -> Any:
        if request["inputs"][0] == 13:
            raise ValueError("unlucky")
        return [2 * v for v in request["inputs"]]


@pytest.fixture
def server() -> mlserve.GraphServer:
    fn = mlserve.new_function("ext")
    fn.add_model("m", class_name=Doubler)
    fn.add_model("v:1", class_name=Doubler)
    fn.add_model("v:2", class_name=Doubler)
    server = fn.to_mock_server()
    server.model_control = True  # --model-control-mode explicit: load/unload allowed
    return server


@pytest.fixture
async def http(server: mlserve.GraphServer) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(server))
    async with httpx.AsyncClient(transport=transport, base_url="http://mlserve") as client:
        yield client


async def test_statistics_count_successes_and_failures(http: httpx.AsyncClient) -> None:
    for value in (1, 2, 13):
        await http.post("/v2/models/m/infer", json={"inputs": [value]})
    stats = (await http.get("/v2/models/m/stats")).json()["model_stats"]
    assert [s["name"] for s in stats] == ["m"]
    entry = stats[0]
    assert entry["inference_count"] == 2 and entry["execution_count"] == 2
    assert entry["inference_stats"]["success"]["count"] == 2
    assert entry["inference_stats"]["fail"]["count"] == 1
    assert entry["inference_stats"]["success"]["ns"] > 0 and entry["last_inference"] > 0
    assert entry["batch_stats"][0]["batch_size"] == 1
    everything = (await http.get("/v2/models/stats")).json()["model_stats"]
    assert {(s["name"], s["version"]) for s in everything} == {("m", ""), ("v", "1"), ("v", "2")}
    versioned = (await http.get("/v2/models/v/versions/2/stats")).json()["model_stats"]
    assert [(s["name"], s["version"]) for s in versioned] == [("v", "2")]
    assert (await http.get("/v2/models/nope/stats")).status_code == 404


async def test_repository_unload_then_load(http: httpx.AsyncClient) -> None:
    index = (await http.post("/v2/repository/index")).json()
    assert {(e["name"], e["version"], e["state"]) for e in index} == {
        ("m", "", "READY"),
        ("v", "1", "READY"),
        ("v", "2", "READY"),
    }
    assert (await http.post("/v2/repository/models/v/unload")).json() == {
        "name": "v",
        "unload": True,
    }
    assert (await http.post("/v2/models/v/infer", json={"inputs": [1]})).status_code == 404
    unready = await http.get("/v2/models/v/versions/1/ready")  # known: ready false, as Triton
    assert (unready.status_code, unready.json()) == (503, {"name": "v", "ready": False})
    index = (await http.post("/v2/repository/index", json={})).json()
    assert {(e["name"], e["state"], e["reason"]) for e in index if e["name"] == "v"} == {
        ("v", "UNAVAILABLE", "unloaded")
    }
    ready_only = (await http.post("/v2/repository/index", json={"ready": True})).json()
    assert [e["name"] for e in ready_only] == ["m"]
    assert (await http.post("/v2/repository/models/v/load")).json() == {"name": "v", "load": True}
    answer = await http.post("/v2/models/v/infer", json={"inputs": [1]})
    assert answer.json()["outputs"] == [2] and answer.json()["model_version"] == "2"
    assert (await http.post("/v2/repository/models/nope/load")).status_code == 404
    assert (await http.post("/v2/repository/models/nope/unload")).status_code == 404


async def test_model_config(http: httpx.AsyncClient) -> None:
    config = (await http.get("/v2/models/v/config")).json()
    assert config["name"] == "v" and config["version"] == "2"
    assert config["input"] == [{"name": "x", "data_type": "TYPE_INT64", "dims": [-1]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_INT64", "dims": [-1]}]
    assert config["max_batch_size"] == 0
    assert (await http.get("/v2/models/v/versions/1/config")).json()["version"] == "1"


class BatchedDoubler(Doubler):
    max_batch_size = 4  # the class's own; a model parameter overrides it


@pytest.mark.parametrize(
    ("add", "size"),
    [
        ({"class_name": Doubler, "max_batch_size": 8}, 8),
        ({"class_name": Doubler, "max_batch_size": "16"}, 16),
        ({"class_name": BatchedDoubler}, 4),
        ({"class_name": BatchedDoubler, "max_batch_size": 32}, 32),
        ({"class_name": BatchedDoubler, "max_batch_size": 0}, 0),
    ],
)
async def test_model_config_shows_the_batch_size_set_as_a_parameter(
    add: dict[str, Any], size: int
) -> None:
    fn = mlserve.new_function("batched")
    fn.add_model("b", **add)
    transport = httpx.ASGITransport(app=create_app(fn.to_mock_server()))
    async with httpx.AsyncClient(transport=transport, base_url="http://mlserve") as http:
        before = (await http.get("/v2/models/b/config")).json()
        answer = await http.post("/v2/models/b/infer", json={"inputs": [1, 2]})
        assert answer.status_code == 200 and answer.json()["outputs"] == [2, 4]
        after = (await http.get("/v2/models/b/config")).json()
    assert before["max_batch_size"] == after["max_batch_size"] == size


async def test_metrics_serves_the_registry(http: httpx.AsyncClient) -> None:
    counter = Counter("mlserve_test_hits", "a counter of this test", registry=REGISTRY)
    try:
        counter.inc(3)
        answer = await http.get("/metrics")
    finally:
        REGISTRY.unregister(counter)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "mlserve_test_hits_total 3.0" in answer.text


async def test_openapi_document_and_docs_page(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    for path in (
        "/v2/health/ready",
        "/v2/models/{model}/infer",
        "/v2/models/{model}/versions/{version}/infer",
        "/v2/repository/index",
        "/v2/models/stats",
        "/metrics",
        "/v2/models/{model}/config",
    ):
        assert path in doc["paths"], path
    served = {  # answered by the TF Serving and model-endpoint faces too
        "/v1/models/{model}": "get",
        "/v1/models/{model}/metadata": "get",
        "/v1/models/{model}:predict": "post",
        "/v1/models/{model}/versions/{version}": "get",
        "/v1/models/{model}/versions/{version}/metadata": "get",
        "/v1/models/{model}/versions/{version}:predict": "post",
        "/v1/models/{model}/labels/{label}": "get",
        "/v1/models/{model}/labels/{label}/metadata": "get",
        "/v1/models/{model}/labels/{label}:predict": "post",
        "/api/v1/projects/{project}/model-endpoints": "get",
        "/api/v1/projects/{project}/model-endpoints/{uid}": "get",
    }
    for path, method in served.items():
        assert method in doc["paths"].get(path, {}), path
    for path, item in doc["paths"].items():  # OpenAPI 3: templated names are declared
        declared = {p["name"] for p in item.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"{(\w+)}", path)), path
        for method, operation in item.items():
            if method == "parameters":
                continue
            for media in operation.get("requestBody", {}).get("content", {}).values():
                assert set(media) <= {"schema", "example", "examples", "encoding"}, path
    page = await http.get("/docs")
    assert page.headers["content-type"].startswith("text/html")
    assert "/v2/repository/models/{model}/unload" in page.text and "<table>" in page.text


@pytest.mark.parametrize(
    ("path", "method", "body"),
    [
        ("/v2/models/stats", "GET", None),
        ("/v2/models/m/config", "GET", None),
        ("/v2/models/nope/config", "GET", None),
        ("/v2/repository/index", "POST", None),
        ("/openapi.json", "GET", None),
        ("/v2/models/m/infer", "POST", {"inputs": [13]}),
    ],
)
async def test_mock_server_and_http_agree(
    server: mlserve.GraphServer, http: httpx.AsyncClient, path: str, method: str, body: Any
) -> None:
    mock = server.test(path, body=body, method=method, silent=True, get_body=False)
    answer = await http.request(method, path, json=body)
    assert answer.status_code == mock.status_code
    assert answer.content == mock.body


def test_an_on_disk_repository_takes_the_place_of_the_graph_repository(tmp_path: Any) -> None:
    """``server.repository`` set by the model repository serves the same REST extension."""
    import yaml

    from mlserve.repository import ModelRepository, function_from_repository
    from tests.repository.fixtures import CLASS_NAME, write_version

    base = tmp_path / "models"
    for version in (1, 2):
        write_version(base, "m", version, bias=version)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": [{"class_name": CLASS_NAME, "name": "m"}]}))
    server = function_from_repository(base, model_config=config, poll_interval=0).to_mock_server()
    server.model_control = True
    try:
        assert isinstance(server.repository, ModelRepository)
        index = server.test("/v2/repository/index", method="POST")
        assert ("m", "READY") in {(e["name"], e["state"]) for e in index}
        assert server.test("/v2/repository/models/m/unload", method="POST") == {
            "name": "m",
            "unload": True,
        }
        assert (
            server.test("/v2/models/m/infer", body={"inputs": [[1, 1]]}, silent=True).status_code
            >= 400
        )
        assert server.test("/v2/repository/models/m/load", method="POST") == {
            "name": "m",
            "load": True,
        }
        assert server.test("/v2/models/m/infer", body={"inputs": [[1, 1]]})["outputs"] == [4.0]
    finally:
        server.wait_for_completion()
