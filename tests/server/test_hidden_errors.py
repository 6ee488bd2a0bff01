"""``--hide-errors`` hides everywhere (docs/security.md#errors-without-leaks): a model
whose load() raises and one whose predict() raises, both with a secret (an absolute
path and a key), on real servers. No answer of any face (V2 REST, Triton's gRPC, TF
Serving's REST and gRPC, the mock server) carries the secret; each carries an error id,
and the log holds that id with the whole text, once."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, start_server
from tests.server.hidden_fn import KEY, PATH, SECRET, fn

FN = "tests/server/hidden_fn.py"
BODY = {"inputs": [1.0]}
TIMEOUT = 60.0  # the first TF Serving call imports TensorFlow in the server
HIDDEN = re.compile(r"(?:internal error|request refused), error id ([0-9a-f]{16})")


def hidden_ids(answers: list[str], *secrets: str) -> set[str]:
    """The error ids of ``answers``, each of which says one and no secret."""
    ids = set()
    for answer in answers:
        for secret in (KEY, PATH, *secrets):
            assert secret not in answer, answer
        found = HIDDEN.findall(answer)
        assert found, answer
        ids.update(found)
    return ids


def assert_logged_once(log: str, ids: set[str], text: str = SECRET) -> None:
    """Each id is in the log on exactly one line that also says ``text``."""
    for error_id in ids:
        lines = [line for line in log.splitlines() if f"error id {error_id}" in line]
        assert sum(text in line for line in lines) == 1, (error_id, lines)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """``hidden_fn.py`` served with --hide-errors and explicit model control."""
    log = tmp_path_factory.mktemp("hidden") / "server.log"
    with log.open("wb") as stderr:
        server = start_server(
            "--hide-errors", "--model-control-mode", "explicit", target=FN, stderr=stderr
        )
    yield server, log
    assert server.stop() == 0


def test_rest_and_tf_serving_rest_answers_hide_the_secret(
    served: tuple[ServerProcess, Path],
) -> None:
    server, log = served
    url = server.url
    answers = {
        "infer on broken": httpx.post(f"{url}/v2/models/broken/infer", json=BODY),
        "infer on leaky": httpx.post(f"{url}/v2/models/leaky/infer", json=BODY),
        "load of broken": httpx.post(f"{url}/v2/repository/models/broken/load", json={}),
        "index": httpx.post(f"{url}/v2/repository/index", json={}),
        "TF status": httpx.get(f"{url}/v1/models/broken"),
        "TF metadata": httpx.get(f"{url}/v1/models/broken/metadata"),
        "TF predict on broken": httpx.post(f"{url}/v1/models/broken:predict", json=BODY),
        "TF predict on leaky": httpx.post(f"{url}/v1/models/leaky:predict", json=BODY),
    }
    statuses = {what: answer.status_code for what, answer in answers.items()}
    assert statuses == {
        "infer on broken": 503,
        "infer on leaky": 500,
        "load of broken": 503,
        "index": 200,
        "TF status": 200,
        "TF metadata": 503,
        "TF predict on broken": 503,
        "TF predict on leaky": 500,
    }
    index = {row["name"]: row for row in answers["index"].json()}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert index["leaky"]["reason"] == ""
    (version,) = answers["TF status"].json()["model_version_status"]
    assert (version["state"], version["status"]["error_code"]) == ("END", "UNKNOWN")
    # the model's readiness and metadata carry no text of the failure
    for path in ("/v2/models/broken/ready", "/v2/models/broken"):
        assert KEY not in httpx.get(f"{url}{path}").text
    ids = hidden_ids([answer.text for answer in answers.values()])
    assert_logged_once(log.read_text(), ids)


def test_triton_grpc_answers_hide_the_secret(served: tuple[ServerProcess, Path]) -> None:
    server, log = served
    client = grpcclient.InferenceServerClient(server.grpc_address)
    x = grpcclient.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.ones(1, dtype=np.float32))
    messages = []
    for call in (
        lambda: client.infer("broken", [x]),
        lambda: client.infer("leaky", [x]),
        lambda: client.load_model("broken"),
    ):
        with pytest.raises(InferenceServerException) as error:
            call()
        messages.append(error.value.message())
    assert error.value.status() == "StatusCode.UNAVAILABLE"
    index = client.get_model_repository_index()
    messages += [model.reason for model in index.models if model.name == "broken"]
    assert not client.is_model_ready("broken")
    ids = hidden_ids([*messages, str(index)])
    assert_logged_once(log.read_text(), ids)


def test_tf_serving_grpc_answers_hide_the_secret(served: tuple[ServerProcess, Path]) -> None:
    pytest.importorskip("tensorflow_serving")
    from tensorflow.core.framework import tensor_pb2, types_pb2
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_service_pb2_grpc,
        predict_pb2,
        prediction_service_pb2_grpc,
    )

    server, log = served
    with grpc.insecure_channel(server.grpc_address) as channel:
        predictions = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        models = model_service_pb2_grpc.ModelServiceStub(channel)
        status = get_model_status_pb2.GetModelStatusRequest()
        status.model_spec.name = "broken"
        answer = models.GetModelStatus(status, TIMEOUT)
        messages = [str(answer)]
        calls = []
        for name in ("broken", "leaky"):
            request = predict_pb2.PredictRequest()
            request.model_spec.name = name
            request.inputs["x"].CopyFrom(
                tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0])
            )
            calls.append(lambda request=request: predictions.Predict(request, TIMEOUT))
        metadata = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        metadata.model_spec.name = "broken"
        calls.append(lambda: predictions.GetModelMetadata(metadata, TIMEOUT))
        codes = []
        for call in calls:
            with pytest.raises(grpc.RpcError) as error:
                call()
            codes.append(error.value.code())
            messages.append(error.value.details())
    assert codes == [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
    ]
    (version,) = answer.model_version_status
    assert version.state == get_model_status_pb2.ModelVersionStatus.END
    ids = hidden_ids(messages)
    assert_logged_once(log.read_text(), ids)


def test_the_mock_server_hides_the_secret(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="mlserve"):
        server = fn.to_mock_server(hide_errors=True, model_control=True)
        answers = [
            server.test(path, body, method=method, silent=True, get_body=True)
            for method, path, body in [
                ("POST", "/v2/models/broken/infer", BODY),
                ("POST", "/v2/models/leaky/infer", BODY),
                ("POST", "/v2/repository/models/broken/load", {}),
                ("POST", "/v2/repository/index", {}),
                ("GET", "/v1/models/broken", None),
            ]
        ]
    ids = hidden_ids([str(getattr(answer, "body", answer)) for answer in answers])
    assert_logged_once(caplog.text, ids)


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path, Path]]:
    """A model repository (``b`` fails to load with the secret, ``m`` serves) served
    with --hide-errors and explicit model control."""
    base = tmp_path / "models"
    for name in ("b", "m"):
        (base / name / "1").mkdir(parents=True)
    config = tmp_path / "config.yaml"
    config.write_text(
        "models:\n"
        "  - {name: b, class_name: tests.server.hidden_fn.Broken}\n"
        "  - {name: m, class_name: tests.server.hidden_fn.Plain}\n"
    )
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        server = start_server(
            "--hide-errors",
            "--model-control-mode",
            "explicit",
            "--model-config",
            str(config),
            "--poll-interval",
            "0",
            target=str(base),
            stderr=stderr,
        )
    yield server, base, log
    assert server.stop() == 0


def test_a_repository_hides_load_errors_and_its_folder(
    repository: tuple[ServerProcess, Path, Path],
) -> None:
    server, base, log = repository
    url = server.url
    root = str(base.resolve())
    index = httpx.post(f"{url}/v2/repository/index", json={})
    assert {(row["name"], row["state"]) for row in index.json()} == {
        ("b", "UNAVAILABLE"),
        ("m", "READY"),
    }
    answers = [
        index.text,
        httpx.post(f"{url}/v2/models/b/infer", json=BODY).text,
        httpx.post(f"{url}/v2/repository/models/b/load", json={}).text,
        str(grpcclient.InferenceServerClient(server.grpc_address).get_model_repository_index()),
    ]
    ids = hidden_ids(answers, root)
    assert_logged_once(log.read_text(), ids)
    assert httpx.post(f"{url}/v2/models/m/infer", json=BODY).status_code == 200


def test_tf_serving_reload_refusals_hide_the_repository_folder(
    repository: tuple[ServerProcess, Path, Path],
) -> None:
    pytest.importorskip("tensorflow_serving")
    from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
    from tensorflow_serving.config import model_server_config_pb2

    server, base, log = repository
    root = str(base.resolve())

    def reload(**models: str) -> grpc.RpcError:
        config = model_server_config_pb2.ModelServerConfig()
        for name, path in models.items():
            config.model_config_list.config.add(name=name, base_path=path)
        request = model_management_pb2.ReloadConfigRequest(config=config)
        with grpc.insecure_channel(server.grpc_address) as channel:
            stub = model_service_pb2_grpc.ModelServiceStub(channel)
            with pytest.raises(grpc.RpcError) as error:
                stub.HandleReloadConfigRequest(request, TIMEOUT)
        return error.value

    outside = reload(ghost=str(base.parent / "elsewhere"))
    assert outside.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert outside.details().startswith("request refused, error id ")
    # b names no class here: its load fails with a message that names its folder
    failing = reload(m=str(base / "m"), b=str(base / "b"))
    assert failing.code() == grpc.StatusCode.UNAVAILABLE
    said = log.read_text()
    assert_logged_once(said, hidden_ids([outside.details()], root), "outside the model repository")
    assert_logged_once(said, hidden_ids([failing.details()], root), root)
    # the refused configs changed nothing
    assert httpx.post(f"{server.url}/v2/models/m/infer", json=BODY).status_code == 200
