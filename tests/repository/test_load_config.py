"""Triton's ``load_model(name, config=...)`` against real servers, over REST and gRPC:
the overrides mlserve has a counterpart for apply (``/v2/models/<m>/config`` shows
them), any other field, invalid JSON or a file override is refused naming it while
the model serves on as before, and a load without a config goes back to the model's
own settings (docs/repository.md#loading-with-a-config-override)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, start_server
from tests.repository.conftest import write_config
from tests.repository.fixtures import BODY, write_version

X = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]}


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[ServerProcess]:
    """``mlserve serve <folder>``: model ``m`` (x . [1, 1] + 1) of max_batch_size 8."""
    base = tmp_path / "models"
    write_version(base, "m", 1, bias=1)
    config = write_config(tmp_path / "config.yaml", [{"name": "m", "max_batch_size": 8}])
    server = start_server(
        "--model-config",
        str(config),
        "--poll-interval",
        "0",
        "--model-control-mode",
        "explicit",
        target=str(base),
    )
    yield server
    assert server.stop() == 0


@pytest.fixture
def function() -> Iterator[ServerProcess]:
    """tests/http/fn.py served with explicit model control: ``scale`` multiplies by 3."""
    server = start_server("--model-control-mode", "explicit")
    yield server
    assert server.stop() == 0


def refused(load: Callable[[], object], field: str, status: str) -> str:
    """The message of a refused load, checked to name ``field`` with ``status``."""
    with pytest.raises(InferenceServerException) as error:
        load()
    assert error.value.status() == status
    message = str(error.value.message())
    assert "failed to load 'm'" in message or "failed to load 'scale'" in message, message
    assert field in message, message
    return message


def m_answers(server: ServerProcess) -> list[float]:
    answer = httpx.post(f"{server.url}/v2/models/m/infer", json=BODY)
    assert answer.status_code == 200, answer.text
    outputs: list[float] = answer.json()["outputs"]
    return outputs


def test_rest_load_applies_a_config_and_refuses_what_mlserve_has_not(
    repository: ServerProcess,
) -> None:
    client = httpclient.InferenceServerClient(repository.address)
    assert client.get_model_config("m")["max_batch_size"] == 8
    bad = '"parameters": {"config": {{"max_batch_size": "16"}}}'  # Triton example's
    refused(lambda: client.load_model("m", config=bad), "not valid JSON", "400")
    for config, field in [
        ('{"instance_group": [{"count": 2}]}', "'instance_group'"),
        ('{"max_batch_size": "sixteen"}', "'max_batch_size'"),
        ('{"dynamic_batching": {"preferred_batch_size": [4]}}', "preferred_batch_size"),
        ('{"parameters": {"model_path": {"string_value": "/etc"}}}', "'model_path'"),
        ('{"name": "other"}', "another model"),
    ]:
        refused(partial(client.load_model, "m", config=config), field, "400")
        assert client.get_model_config("m")["max_batch_size"] == 8
        assert m_answers(repository) == [4.0]  # the model loaded before serves on
    overrides = '{"max_batch_size": "16", "parameters": {"threshold": {"string_value": "0.5"}}}'
    client.load_model("m", config=overrides)
    config = client.get_model_config("m")
    assert config["max_batch_size"] == 16
    assert config["parameters"]["threshold"] == {"string_value": "0.5"}
    assert m_answers(repository) == [4.0]
    client.load_model("m")  # no config: the model's own settings again
    config = client.get_model_config("m")
    assert (config["max_batch_size"], "threshold" in config["parameters"]) == (8, False)


def test_grpc_load_applies_a_config_and_refuses_files(repository: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(repository.grpc_address)
    invalid = "StatusCode.INVALID_ARGUMENT"
    refused(lambda: client.load_model("m", config="{"), "not valid JSON", invalid)
    files = {"file:1/model.json": b"{}"}  # answered as Triton answers a file it cannot write
    refused(
        lambda: client.load_model("m", config="{}", files=files),
        "failed to poll from model repository: failed to load 'm': file override "
        "'file:1/model.json'",
        "StatusCode.INTERNAL",
    )
    config = '{"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": 500}}'
    client.load_model("m", config=config)
    assert client.get_model_config("m").config.max_batch_size == 4
    parameters = client.get_model_config("m").config.parameters
    assert parameters["max_batch_time"].string_value == "0.0005"
    assert client.is_model_ready("m")
    assert m_answers(repository) == [4.0]


def scaled(server: ServerProcess) -> list[float]:
    answer = httpx.post(f"{server.url}/v2/models/scale/infer", json=X)
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
    return [float(v) for v in outputs["scaled"]]


def test_function_mode_load_applies_parameters_until_a_load_without(
    function: ServerProcess,
) -> None:
    rest = httpclient.InferenceServerClient(function.address)
    remote = grpcclient.InferenceServerClient(function.grpc_address)
    assert scaled(function) == [3.0, 6.0]
    rest.load_model("scale", config='{"parameters": {"factor": {"string_value": "5"}}}')
    assert scaled(function) == [5.0, 10.0]
    assert rest.get_model_config("scale")["parameters"]["factor"] == {"string_value": "5"}
    refused(
        lambda: remote.load_model("scale", config='{"output": []}'),
        "'output'",
        "StatusCode.INVALID_ARGUMENT",
    )
    assert scaled(function) == [5.0, 10.0]
    remote.load_model("scale", config='{"max_batch_size": 2}')  # replaces the factor override
    assert remote.get_model_config("scale").config.max_batch_size == 2
    tensor = grpcclient.InferInput("x", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
    result = remote.infer("scale", [tensor], client_timeout=10).as_numpy("scaled")
    assert result.tolist() == [[3.0, 6.0]]
    rest.load_model("scale")
    assert rest.get_model_config("scale")["max_batch_size"] == 0
    assert scaled(function) == [3.0, 6.0]
