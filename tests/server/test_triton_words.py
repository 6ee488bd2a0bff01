"""Triton's words and the Open Inference Protocol's schema on real servers
(docs/protocol.md#errors, docs/protocol.md#model-metadata): tritonclient's example
programs look for Triton's phrases in ``e.message()``; a known model that is not
served is ``ready: false``; the OIP's own REST document, fuzzed, finds no 5xx and
no answer outside its schemas (but for mlrun's rows form, which it does not know)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import schemathesis
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from mlserve.protocol.forms import is_tensor_inputs
from tests.netserver import ServerProcess, start_server

TARGET = "tests/server/triton_words_fn.py"
OIP_REST = Path(__file__).with_name("open_inference_rest.yaml")


@pytest.fixture(scope="module")
def served() -> Iterator[ServerProcess]:
    server = start_server("--model-control-mode", "explicit", target=TARGET)
    yield server
    assert server.stop() == 0


Client = httpclient.InferenceServerClient | grpcclient.InferenceServerClient


@pytest.fixture(scope="module", params=["http", "grpc"])
def client(request: pytest.FixtureRequest, served: ServerProcess) -> Client:
    if request.param == "http":
        return httpclient.InferenceServerClient(served.url.removeprefix("http://"))
    return grpcclient.InferenceServerClient(served.grpc_address)


def _message(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return str(info.value.message())


def _inputs(client: Client, **arrays: np.ndarray) -> list[Any]:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def test_an_unknown_model_in_tritons_words(client: Client) -> None:
    # as Triton's simple_*_model_control and health examples check it
    said = _message(client.get_model_metadata, "wrong_model_name")
    assert said.startswith("Request for unknown model: 'wrong_model_name' is not")
    assert "Request for unknown model" in _message(client.infer, "wrong_model_name", [])


def test_an_unknown_version_in_tritons_words(client: Client) -> None:
    said = _message(client.get_model_metadata, "scale", "3")
    assert said == "Request for unknown model: 'scale' version 3 is not found (ModelNotFound)"
    said = _message(client.get_model_metadata, "scale", "x")
    assert said == ("failed to get model version from specified version string 'x' (ModelNotFound)")


def test_a_wrong_input_count_or_shape_in_tritons_words(client: Client) -> None:
    one = _inputs(client, a=np.ones(2, np.float32))
    assert _message(client.infer, "pair", one) == (
        "InvalidInput: expected 2 inputs but got 1 inputs for model 'pair': missing input 'b'"
    )
    wide = _inputs(client, x=np.ones((1, 3), np.float32))
    assert _message(client.infer, "scale", wide, model_version="1") == (
        "InvalidInput: unexpected shape for input 'x' for model 'scale'. Expected [-1,2], got [1,3]"
    )


def test_an_unloaded_model_is_not_ready_rather_than_not_found(served: ServerProcess) -> None:
    http = httpclient.InferenceServerClient(served.url.removeprefix("http://"))
    rpc = grpcclient.InferenceServerClient(served.grpc_address)
    http.unload_model("pair")
    try:
        assert http.is_model_ready("pair") is False
        assert rpc.is_model_ready("pair") is False
        answer = httpx.get(f"{served.url}/v2/models/pair/ready")
        assert (answer.status_code, answer.json()) == (503, {"name": "pair", "ready": False})
        assert "Request for unknown model" in _message(rpc.get_model_metadata, "pair")
        assert "is not found" in _message(rpc.is_model_ready, "nope")  # unknown: still 404
    finally:
        http.load_model("pair")
    assert rpc.is_model_ready("pair") is True


def test_metadata_always_has_a_platform_and_grpc_has_properties(
    served: ServerProcess,
) -> None:
    meta = httpx.get(f"{served.url}/v2/models/scale/versions/1").json()
    assert (meta["platform"], meta["versions"]) == ("", ["1"])
    rpc = grpcclient.InferenceServerClient(served.grpc_address)
    response = rpc.get_model_metadata("pair")
    assert response.platform == "" and [i.name for i in response.inputs] == ["a", "b"]
    # tritonclient's proto predates the OIP's field 6 (properties): it keeps it unknown.
    # Each map entry is {1: key, 2: value}, which ModelReadyRequest's {1: name, 2: version}
    # reads (mlserve's own stubs cannot be imported beside tritonclient's).
    entries = [f.data for f in UnknownFieldSet(response) if f.field_number == 6]
    pairs = [service_pb2.ModelReadyRequest.FromString(entry) for entry in entries]
    assert [(p.name, p.version) for p in pairs] == [("adds", "a+b")]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"inputs": []}, "InvalidInput: expected 1 inputs but got 0 inputs for model 'scale'"),
        (
            {
                "inputs": [
                    {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]},
                    {"name": "z", "shape": [1], "datatype": "FP32", "data": [1]},
                ]
            },
            "InvalidInput: expected 1 inputs but got 2 inputs for model 'scale': "
            "unexpected input 'z'",
        ),
        (
            {"inputs": [{"name": "w", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]},
            "InvalidInput: unexpected input 'w', the model's inputs are ['x']",
        ),
    ],
)
def test_inputs_that_do_not_match_the_declared_ones_are_400(
    served: ServerProcess, body: dict[str, Any], error: str
) -> None:
    answer = httpx.post(f"{served.url}/v2/models/scale/versions/1/infer", json=body)
    assert (answer.status_code, answer.json()) == (400, {"error": error})


def _oip_schema(url: str) -> Any:
    """The OIP's REST document, its placeholders pointing at ``scale`` version 1."""
    text = OIP_REST.read_text().replace("${MODEL_NAME}", "scale").replace("${MODEL_VERSION}", "1")
    document = yaml.safe_load(text)
    for item in document["paths"].values():
        item.pop("parameters", None)  # the placeholders are gone from the paths
    schema = schemathesis.openapi.from_dict(document)
    schema.config.update(base_url=url)
    return schema


def test_the_oip_rest_document_finds_no_5xx_and_no_schema_violation(
    served: ServerProcess,
) -> None:
    operations = [result.ok() for result in _oip_schema(served.url).get_all_operations()]
    assert len(operations) == 6  # live, ready, server metadata, model ready, metadata, infer
    failures: list[str] = []
    statuses: list[int] = []
    for operation in operations:
        for mode in GenerationMode:

            @given(case=operation.as_strategy(generation_mode=mode))
            @seed(20261127)
            @settings(
                max_examples=25,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def run(case: schemathesis.Case) -> None:
                response = case.call(timeout=10)
                statuses.append(response.status_code)
                checks = [not_a_server_error, response_schema_conformance]
                if case.method == "POST" and response.status_code == 200:
                    if not is_tensor_inputs(case.body["inputs"]):
                        # a negative case outside the OIP that is mlrun's rows form
                        # (docs/protocol.md#rows-form), answered in mlrun's envelope
                        checks = [not_a_server_error]
                try:
                    case.validate_response(response, checks=checks)
                except AssertionError as exc:
                    failures.append(f"{case.method} {case.formatted_path}: {exc}"[:400])

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing in it can be made invalid
    assert failures == []
    assert {200, 400} <= set(statuses)  # valid inferences and refused ones were both sent
