"""The nuclio entry points, driven with nuclio_sdk's own Event, TriggerInfo and Context."""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
from pathlib import Path
from typing import Any

import nuclio_sdk
import pytest
import yaml

import mlserve
from mlserve.runtimes import nuclio as runtime
from tests.fixtures import GatedLoad

TESTDATA = Path(__file__).parent.parent / "testdata"


def _function() -> mlserve.ServingFunction:
    fn = mlserve.code_to_function("nuclio-fn", filename=str(TESTDATA / "serving_code.py"))
    fn.add_model("scaler", class_name="Scaler", scale=10)
    fn.add_model("scaler:2", class_name="Scaler", scale=20)
    fn.add_model("doubler", class_name="Doubler")
    fn.spec.parameters = {"greeting": "hello"}
    return fn


def _context(kind: str = "http") -> nuclio_sdk.Context:
    return nuclio_sdk.Context(
        logger=nuclio_sdk.Logger(logging.DEBUG, name="test-nuclio"),
        worker_id=0,
        trigger=nuclio_sdk.TriggerInfo(kind, kind),
    )


def _event(
    path: str,
    body: Any = None,
    kind: str = "http",
    method: str = "POST",
    content_type: str = "application/json",
    event_id: str | None = "ev-1",
    headers: dict[str, Any] | None = None,
) -> nuclio_sdk.Event:
    raw = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    return nuclio_sdk.Event(
        body=raw,
        content_type=content_type,
        path=path,
        method=method,
        trigger=nuclio_sdk.TriggerInfo(kind, f"my-{kind}"),
        _id=event_id,
        headers=headers or {"Content-Type": content_type},
    )


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch) -> nuclio_sdk.Context:
    monkeypatch.setenv(runtime.SPEC_ENV, json.dumps(_function().to_dict()))
    ctx = _context()
    runtime.init_context(ctx)
    return ctx


def _json(response: nuclio_sdk.Response) -> Any:
    assert isinstance(response, nuclio_sdk.Response)
    return json.loads(response.body)


# ---- init_context ----


def test_init_context_from_the_env_var(context: nuclio_sdk.Context) -> None:
    server = context.user_data.mlserve_server
    assert isinstance(server, mlserve.GraphServer)
    assert server.test("/v2/models") == {"models": ["scaler", "scaler:2", "doubler"]}


def test_init_context_from_a_mounted_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _function().export(str(tmp_path / "function.yaml"))
    monkeypatch.delenv(runtime.SPEC_ENV, raising=False)
    monkeypatch.setenv(runtime.SPEC_PATH_ENV, path)
    ctx = _context()
    runtime.init_context(ctx)
    response = runtime.handler(ctx, _event("/v2/models/scaler/infer", {"inputs": [2]}))
    assert _json(response)["outputs"] == [20]


def test_init_context_without_a_spec_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(runtime.SPEC_ENV, raising=False)
    monkeypatch.setenv(runtime.SPEC_PATH_ENV, str(tmp_path / "missing.yaml"))
    with pytest.raises(RuntimeError, match="no function to serve"):
        runtime.init_context(_context())


def test_the_default_mounted_path() -> None:
    assert runtime.DEFAULT_SPEC_PATH == "/etc/mlserve/function.yaml"


# ---- HTTP events ----


def test_http_event_infer(context: nuclio_sdk.Context) -> None:
    response = runtime.handler(context, _event("/v2/models/scaler/infer", {"inputs": [1, 2]}))
    assert response.status_code == 200
    assert response.content_type == "application/json"
    answer = _json(response)
    assert answer["outputs"] == [10, 20]
    assert answer["id"] == "ev-1"  # the nuclio event id
    assert answer["model_name"] == "scaler"


@pytest.mark.parametrize(
    ("path", "method", "body", "expected"),
    [
        ("/v2/models", "GET", None, {"models": ["scaler", "scaler:2", "doubler"]}),
        ("/v2/health/live", "GET", None, {"live": True}),
        ("/v2/health/ready", "GET", None, {"ready": True}),
        (
            "/v2/models/scaler/versions/2/describe",
            "POST",
            {},
            {"model": "scaler", "version": "2", "scale": 20},
        ),
        (
            "/v2/models/scaler/explain",
            "POST",
            {"id": "x", "inputs": [1]},
            {"id": "x", "model_name": "scaler", "outputs": {"scale": 10, "greeting": "hello"}},
        ),
        (
            "/v2/models/doubler/infer",
            "POST",
            {
                "id": "t",
                "inputs": [{"name": "a", "shape": [2], "datatype": "FP32", "data": [1, 2]}],
            },
            {
                "id": "t",
                "model_name": "doubler",
                "outputs": [
                    {"name": "doubled", "datatype": "FP64", "shape": [2], "data": [2.0, 4.0]}
                ],
            },
        ),
    ],
)
def test_http_events(
    context: nuclio_sdk.Context, path: str, method: str, body: Any, expected: Any
) -> None:
    response = runtime.handler(context, _event(path, body, method=method))
    assert response.status_code == 200
    assert _json(response) == expected


@pytest.mark.parametrize(
    ("path", "body", "content_type", "status", "error"),
    [
        (
            "/v2/models/nope/infer",
            b'{"inputs": [1]}',
            "application/json",
            404,
            "Request for unknown model: 'nope' is not found (ModelNotFound)",
        ),
        (
            "/v2/models/scaler/infer",
            b"{bad",
            "application/json",
            400,
            "InvalidInput: invalid JSON: ",
        ),
        (
            "/v2/models/scaler/nope",
            b'{"inputs": [1]}',
            "application/json",
            400,
            "IllegalOperation: illegal model operation 'nope', method=POST",
        ),
    ],
)
def test_http_errors(
    context: nuclio_sdk.Context, path: str, body: bytes, content_type: str, status: int, error: str
) -> None:
    response = runtime.handler(context, _event(path, body, content_type=content_type))
    assert response.status_code == status
    assert response.content_type == "application/json"
    assert _json(response)["error"].startswith(error)


def test_a_body_nuclio_already_decoded(context: nuclio_sdk.Context) -> None:
    event = nuclio_sdk.Event(
        body={"inputs": [3]},
        content_type="application/json",
        method="POST",
        path="/v2/models/scaler/infer",
        trigger=nuclio_sdk.TriggerInfo("http", "h"),
    )
    assert _json(runtime.handler(context, event))["outputs"] == [30]


def test_the_response_goes_through_nuclios_own_encoder(context: nuclio_sdk.Context) -> None:
    response = runtime.handler(
        context, _event("/v2/models/scaler/infer", {"id": "n", "inputs": [1]})
    )
    wire = nuclio_sdk.Response.from_entrypoint_output(json.dumps, response)
    assert wire["status_code"] == 200
    assert wire["content_type"] == "application/json"
    assert wire["body_encoding"] == "text"
    assert json.loads(wire["body"])["outputs"] == [10]


def test_an_event_without_id_gets_one(context: nuclio_sdk.Context) -> None:
    response = runtime.handler(
        context, _event("/v2/models/scaler/infer", {"inputs": [1]}, event_id=None)
    )
    assert _json(response)["id"]


# ---- stream triggers ----


@pytest.mark.parametrize("kind", ["kafka", "kafka-cluster", "v3ioStream"])
def test_stream_trigger_resets_the_path_and_the_body_routes(
    context: nuclio_sdk.Context, kind: str
) -> None:
    event = _event(
        "/my-topic/partition/0",
        {"model": "scaler:2", "inputs": [1]},
        kind=kind,
        method="POST",
        content_type="",
    )
    response = runtime.handler(context, event)
    assert response.status_code == 200
    answer = _json(response)
    assert answer["outputs"] == [20]
    assert (answer["model_name"], answer["model_version"]) == ("scaler", "2")


def test_kafka_event_without_model_goes_to_the_first_route(context: nuclio_sdk.Context) -> None:
    response = runtime.handler(
        context, _event("/ignored", {"inputs": [4]}, kind="kafka", content_type="")
    )
    assert _json(response)["outputs"] == [40]


def test_kafka_event_operation_from_the_body(context: nuclio_sdk.Context) -> None:
    body = {"model": "scaler", "operation": "describe"}
    response = runtime.handler(context, _event("/x", body, kind="kafka", content_type=""))
    assert _json(response) == {"model": "scaler", "version": "", "scale": 10}


def test_http_event_keeps_its_path(context: nuclio_sdk.Context) -> None:
    response = runtime.handler(
        context, _event("/v2/models/scaler:2/infer", {"model": "doubler", "inputs": [1]})
    )
    assert _json(response)["outputs"] == [20]


@pytest.mark.parametrize(
    ("kind", "path", "expected_path", "trigger"),
    [
        ("http", "/v2/models/a", "/v2/models/a", "http"),
        ("kafka", "/topic", "/", "kafka"),
        ("kafka-cluster", "", "/", "kafka-cluster"),
        ("cron", "/c", "/c", "cron"),
    ],
)
def test_to_event(kind: str, path: str, expected_path: str, trigger: str) -> None:
    event = runtime.to_event(_event(path, {"a": 1}, kind=kind, headers={"X-A": "1"}))
    assert event.path == expected_path
    assert event.trigger.kind == trigger
    assert event.trigger.name == f"my-{kind}"
    assert event.body == b'{"a": 1}'
    assert event.headers == {"X-A": "1"}
    assert event.id == "ev-1"
    assert event.method == "POST"
    assert event.content_type == "application/json"


def test_kafka_event_waits_for_an_async_load(monkeypatch: pytest.MonkeyPatch) -> None:
    fn = mlserve.new_function("slow")
    fn.add_model("m", class_name="tests.fixtures.GatedLoad", gate="nuclio-slow", multiplier=3)
    fn.spec.load_mode = "async"
    fn.spec.parameters = {"load_wait_timeout": 0.05}
    monkeypatch.setenv(runtime.SPEC_ENV, json.dumps(fn.to_dict()))
    ctx = _context()
    runtime.init_context(ctx)
    over_http = runtime.handler(ctx, _event("/v2/models/m/infer", {"inputs": [1]}))
    assert (over_http.status_code, _json(over_http)) == (
        503,
        {"error": "ModelNotReady: model m is not ready yet"},
    )
    from_kafka = runtime.handler(ctx, _event("/t", {"inputs": [1]}, kind="kafka", content_type=""))
    assert _json(from_kafka) == {"error": "ModelNotReady: model m did not become ready: timeout"}
    GatedLoad.gate("nuclio-slow").set()
    ctx.user_data.mlserve_server.graph.routes["m"].object._loaded.wait(10)
    from_kafka = runtime.handler(ctx, _event("/t", {"inputs": [1]}, kind="kafka", content_type=""))
    assert _json(from_kafka)["outputs"] == [3]


# ---- the nuclio function config ----


def test_to_nuclio_config() -> None:
    fn = _function().with_requirements(["scikit-learn>=1.4", "xgboost"])
    config = fn.to_nuclio_config()
    assert config["apiVersion"] == "nuclio.io/v1"
    assert config["kind"] == "NuclioFunction"
    assert config["metadata"]["name"] == "nuclio-fn"
    assert config["spec"]["handler"] == "mlserve_function:handler"
    assert config["spec"]["runtime"] == "python:3.11"
    build = config["spec"]["build"]
    assert build["baseImage"] == "python:3.11-slim"
    assert build["commands"] == [
        f"pip install mlserve=={mlserve.__version__}",
        "pip install 'scikit-learn>=1.4' xgboost",
    ]
    code = base64.b64decode(build["functionSourceCode"]).decode()
    assert code.startswith((TESTDATA / "serving_code.py").read_text().rstrip())
    assert "from mlserve.runtimes.nuclio import handler" in code
    (env,) = config["spec"]["env"]
    assert env["name"] == "SERVING_SPEC_ENV"
    spec = fn.to_dict()
    spec["spec"].pop("build")  # the code is the handler module's
    assert json.loads(env["value"]) == spec


def test_nuclio_config_warns_about_model_paths_of_this_machine(tmp_path: Path) -> None:
    fn = _function()
    fn.add_model("local", class_name="Scaler", model_path=str(tmp_path))
    fn.add_model("remote", class_name="Scaler", model_path="s3://bucket/model")
    with pytest.warns(UserWarning, match=f"only exist on this machine \\(local: {tmp_path}\\)"):
        fn.to_nuclio_config()


def _load_handler_module(config: dict[str, Any], folder: Path) -> Any:
    """Import the config's handler module as nuclio's build would write it."""
    module_name, _, _ = config["spec"]["handler"].partition(":")
    path = folder / f"{module_name}.py"
    path.write_bytes(base64.b64decode(config["spec"]["build"]["functionSourceCode"]))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_export_nuclio_config_then_run_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, suffix: str
) -> None:
    path = _function().export(str(tmp_path / f"nuclio{suffix}"), format="nuclio")
    text = Path(path).read_text()
    config = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    assert config == _function().to_nuclio_config()
    env = {item["name"]: item["value"] for item in config["spec"]["env"]}
    monkeypatch.setenv(runtime.SPEC_ENV, env[runtime.SPEC_ENV])
    module = _load_handler_module(config, tmp_path)
    ctx = _context()
    module.init_context(ctx)
    response = module.handler(ctx, _event("/v2/models/scaler/versions/2/infer", {"inputs": [5]}))
    assert _json(response)["outputs"] == [100]


def test_export_refuses_an_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown export format 'helm'"):
        _function().export(str(tmp_path / "x.yaml"), format="helm")
