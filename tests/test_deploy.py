"""``fn.deploy()`` / ``fn.invoke()`` / ``fn.stop()`` on a local background server,
and ``add_model(model_url=...)`` forwarding to it (``RemoteModel``)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient

import mlserve
from mlserve.server.graph_server import ServingRequestError
from tests.netserver import ROOT


@pytest.fixture(scope="module")
def backend() -> Iterator[mlserve.ServingFunction]:
    fn = mlserve.code_to_function("backend", filename=str(ROOT / "tests" / "http" / "fn.py"))
    fn.add_model("echo", class_name="Echo")
    fn.add_model("scale", class_name="Scale", factor=3)
    fn.deploy()
    yield fn
    fn.stop()


def test_deploy_and_invoke(backend: mlserve.ServingFunction) -> None:
    url = backend._deployment.url
    assert url.startswith("http://127.0.0.1:")
    assert backend.invoke("/v2/health/ready") == {"ready": True}
    assert backend.invoke("/v2/models/echo/infer", {"inputs": [1, 2]})["outputs"] == [1, 2]
    assert backend.invoke("v2/models/echo/infer", b'{"inputs": [3]}', method="POST")["outputs"] == [
        3
    ]
    with pytest.raises(ServingRequestError) as info:
        backend.invoke("/v2/models/nope/infer", {"inputs": [1]})
    assert info.value.status_code == 404 and "nope" in info.value.body["error"]


def test_stop_ends_the_process_cleanly() -> None:
    fn = mlserve.code_to_function("short", filename=str(ROOT / "tests" / "http" / "fn.py"))
    fn.add_model("echo", class_name="Echo")
    fn.deploy()
    proc = fn._deployment.proc
    fn.stop()
    assert proc.returncode == 0
    with pytest.raises(RuntimeError, match="not deployed"):
        fn.invoke("/v2/health/live")


@pytest.fixture(scope="module")
def front(backend: mlserve.ServingFunction) -> mlserve.ServingFunction:
    url = backend._deployment.url
    fn = mlserve.new_function("front")
    fn.add_model("tripler", model_url=f"{url}/v2/models/scale")
    fn.add_model("echo", model_url=url)  # a server URL: the route key names the remote model
    return fn


def test_remote_model_forwards(front: mlserve.ServingFunction) -> None:
    server = front.to_mock_server()
    body = {
        "inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}],
        "outputs": [{"name": "total"}],
    }
    answer = server.test("/v2/models/tripler/infer", body=body)
    assert answer["model_name"] == "scale"
    assert answer["outputs"] == [{"name": "total", "datatype": "FP32", "shape": [1], "data": [3.0]}]
    assert server.test("/v2/models/echo/infer", body={"inputs": ["a"]})["outputs"] == ["a"]
    assert server.test("/v2/models/tripler")["inputs"][0]["name"] == "x"
    wrong = {"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", "data": [1, 2, 3]}]}
    bad = server.test("/v2/models/tripler/infer", body=wrong, silent=True)
    assert bad.status_code == 400 and "'x'" in bad.body["error"]
    stats = server.test("/v2/models/tripler/stats")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 1
    assert stats["inference_stats"]["fail"]["count"] == 1


def test_remote_model_through_two_real_servers_in_binary(front: mlserve.ServingFunction) -> None:
    front.deploy()
    try:
        client = httpclient.InferenceServerClient(front._deployment.url.removeprefix("http://"))
        x = httpclient.InferInput("x", [2, 2], "FP32")
        x.set_data_from_numpy(np.array([[1, 2], [3, 4]], dtype=np.float32), binary_data=True)
        result = client.infer("tripler", [x], outputs=[httpclient.InferRequestedOutput("scaled")])
        np.testing.assert_array_equal(result.as_numpy("scaled"), [[3, 6], [9, 12]])
    finally:
        front.stop()
