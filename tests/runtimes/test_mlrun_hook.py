"""mlrun's nuclio entry point (``nuclio_init_hook`` / ``context.mlrun_handler``), driven
with nuclio_sdk's own Context, Event and TriggerInfo as nuclio would call it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import nuclio_sdk
import pytest

import mlserve
from mlserve.runtimes.nuclio import mlrun_handler, nuclio_init_hook, serving_subkind
from mlserve.server.graph_server import GraphServer
from tests.fixtures import FailingLoad, Multiplier


class Raiser(mlserve.V2ModelServer):
    def predict(self, request: dict[str, Any]) -> Any:
        raise ValueError("simulated error")


def _spec(routes: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A serving spec as mlrun writes SERVING_SPEC_ENV."""
    return {
        "version": "v2",
        "parameters": {},
        "graph": {"kind": "router", "routes": routes},
        "load_mode": "sync",
        "verbose": True,
        "function_uri": "proj/func",
        **extra,
    }


# What the generated nuclio code hands over as globals(): where class names resolve.
NAMESPACE = {"Multiplier": Multiplier, "Raiser": Raiser, "FailingLoad": FailingLoad}

ROUTES = {
    "m1": {"class_name": "Multiplier", "class_args": {"multiplier": 100}},
    "m3:v2": {"class_name": "Multiplier", "class_args": {"multiplier": 400}},
    "bad": {"class_name": "Raiser"},
    "broken": {"class_name": "FailingLoad"},
}


def _init(monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]) -> nuclio_sdk.Context:
    monkeypatch.setenv("SERVING_SPEC_ENV", json.dumps(spec))
    context = nuclio_sdk.Context(
        logger=nuclio_sdk.Logger(logging.DEBUG, name="test-mlrun-hook"),
        worker_id=0,
        trigger=nuclio_sdk.TriggerInfo("http", "http"),
    )
    nuclio_init_hook(context, NAMESPACE, serving_subkind)
    return context


def _event(path: str, body: Any = None, method: str = "POST", kind: str = "http") -> Any:
    raw = json.dumps(body).encode() if body is not None else b""
    return nuclio_sdk.Event(
        body=raw,
        content_type="application/json",
        path=path,
        method=method,
        trigger=nuclio_sdk.TriggerInfo(kind, f"my-{kind}"),
        _id="ev-7",
        headers={},
    )


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch) -> nuclio_sdk.Context:
    return _init(monkeypatch, _spec(ROUTES))


def test_the_hook_serves_the_spec_with_the_callers_globals(context: Any) -> None:
    assert context.mlrun_handler is mlrun_handler
    assert isinstance(context._server, GraphServer)
    assert context._server.function_uri == "proj/func"
    answer = context.mlrun_handler(context, _event("/v2/models/m1/infer", {"inputs": [5]}))
    assert isinstance(answer, nuclio_sdk.Response)  # the context's own Response class
    assert answer.status_code == 200
    assert json.loads(answer.body)["outputs"] == [500]
    answer = context.mlrun_handler(
        context, _event("/v2/models/m3/versions/v2/infer", {"inputs": [1]})
    )
    assert json.loads(answer.body)["outputs"] == [400]


def test_a_stream_event_routes_by_its_body(context: Any) -> None:
    event = _event("/some/topic", {"model": "m1", "inputs": [2]}, kind="kafka")
    assert json.loads(context.mlrun_handler(context, event).body)["outputs"] == [200]


def test_mock_events_are_accepted_as_they_are(context: Any) -> None:
    event = mlserve.MockEvent('{"inputs": [1]}', path="/v2/models/m1/infer")
    assert json.loads(context.mlrun_handler(context, event).body)["outputs"] == [100]


@pytest.mark.parametrize(
    ("path", "body", "text"),
    [
        ("/v2/models/bad/infer", {"inputs": [1]}, "ValueError: simulated error"),  # 500 in V2
        (
            "/v2/models/nope/infer",
            {"inputs": [1]},
            "Request for unknown model: 'nope' is not found (ModelNotFound)",
        ),  # 404
        ("/v2/models/m1/xx", {"inputs": [1]}, "IllegalOperation: illegal model operation"),
        ("/v2/models/broken/infer", {"inputs": [1]}, "ModelNotReady: model broken"),  # 503
    ],
)
def test_errors_answer_as_mlruns_a_400_with_the_error_text(
    context: Any, path: str, body: Any, text: str
) -> None:
    answer = context.mlrun_handler(context, _event(path, body))
    assert answer.status_code == 400
    assert answer.content_type == "text/plain"
    assert answer.body.decode().startswith(text)


def test_model_ready_answers_as_mlruns(context: Any) -> None:
    answer = context.mlrun_handler(context, _event("/v2/models/m1/ready", method="GET"))
    assert (answer.status_code, answer.body) == (200, b"Model m1 is ready (event_id = ev-7)")
    answer = context.mlrun_handler(context, _event("/v2/models/broken/ready", method="GET"))
    assert (answer.status_code, answer.body) == (408, b"model not ready")


def test_health_and_listing_keep_their_bodies(context: Any) -> None:
    health = context.mlrun_handler(context, _event("/v2/health", method="GET"))
    assert json.loads(health.body)["version"] == "v2"
    listing = context.mlrun_handler(context, _event("/v2/models/", method="GET"))
    assert json.loads(listing.body) == {"models": list(ROUTES)}
    ready = context.mlrun_handler(context, _event("/v2/health/ready", method="GET"))
    assert ready.status_code == 400  # not every model is ready ("broken"): an error, as mlrun's


def test_an_mlserve_function_spec_is_served_too(monkeypatch: pytest.MonkeyPatch) -> None:
    fn = mlserve.new_function("f", project="p")
    fn.add_model("m", class_name=Multiplier, multiplier=3)
    context = _init(monkeypatch, fn.to_dict())
    answer = context.mlrun_handler(context, _event("/v2/models/m/infer", {"inputs": [2]}))
    assert json.loads(answer.body)["outputs"] == [6]


def test_an_exported_function_brings_its_own_code(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code = tmp_path / "fn_code.py"
    code.write_text(
        "from mlserve import V2ModelServer\n\n"
        "class Tripler(V2ModelServer):\n"
        "    def predict(self, request):\n"
        "        return [x * 3 for x in request['inputs']]\n"
    )
    fn = mlserve.code_to_function("coded", filename=str(code))
    fn.add_model("t", class_name="Tripler")
    context = _init(monkeypatch, fn.to_dict())
    answer = context.mlrun_handler(context, _event("/v2/models/t/infer", {"inputs": [2]}))
    assert json.loads(answer.body)["outputs"] == [6]


def test_other_kinds_and_a_missing_spec_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    context = nuclio_sdk.Context(logger=nuclio_sdk.Logger(logging.DEBUG, name="x"))
    with pytest.raises(ValueError, match="unsupported nuclio kind 'serving'"):
        nuclio_init_hook(context, {}, "serving")
    monkeypatch.delenv("SERVING_SPEC_ENV", raising=False)
    with pytest.raises(RuntimeError, match="SERVING_SPEC_ENV"):
        nuclio_init_hook(context, {}, serving_subkind)
    monkeypatch.setenv("SERVING_SPEC_ENV", "{not json")
    with pytest.raises(RuntimeError, match="is not JSON"):
        nuclio_init_hook(context, {}, serving_subkind)


def test_the_server_spec_round_trips() -> None:
    server = GraphServer.from_dict(_spec(ROUTES, parameters={"a": 1}))
    struct = server.to_dict()
    assert struct["graph"]["routes"]["m1"]["class_args"] == {"multiplier": 100}
    assert (struct["function_uri"], struct["parameters"], struct["version"]) == (
        "proj/func",
        {"a": 1},
        "v2",
    )
    again = GraphServer.from_dict(struct)
    assert (again.project, again.function_name) == ("proj", "func")
    assert again.to_yaml() == server.to_yaml()
    assert "class_name: Multiplier" in server.to_yaml()
