"""GraphServer: test() semantics, body parsing, errors, load modes, run()."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import mlserve
from mlserve import Event, GraphServer, Response, ServingRequestError, create_graph_server
from mlserve.core.handlers import answers_only
from mlserve.protocol.tensors import loads
from tests.fixtures import GatedLoad, Multiplier, Raising, model_of, serve


@pytest.fixture(scope="module")
def server() -> GraphServer:
    return serve({"m": (Multiplier, {"multiplier": 2}), "bad": Raising})


# ---- test(): method, silent, get_body ----


def test_method_defaults_to_post_with_a_body_and_get_without(server: GraphServer) -> None:
    assert server.test("/v2/models/m/event", body={"a": 1})["method"] == "POST"
    assert server.test("/v2/models/m/event")["method"] == "GET"
    assert server.test("/v2/models/m/event", method="get")["method"] == "GET"
    refused = server.test("/v2/models/m/event", method="PUT", silent=True)
    assert (refused.status_code, refused.headers) == (405, {"Allow": "GET, HEAD, POST"})


def test_get_without_body_on_a_model_is_its_metadata(server: GraphServer) -> None:
    assert server.test("/v2/models/m")["name"] == "m"
    assert server.test("/v2/models/m", body={"inputs": [1]})["outputs"] == [2]


def test_error_raises_a_runtime_error_with_status_and_body(server: GraphServer) -> None:
    with pytest.raises(RuntimeError) as info:
        server.test("/v2/models/nope/infer", body={"inputs": [1]})
    error = info.value
    assert isinstance(error, ServingRequestError)
    assert error.status_code == 404
    assert error.body == {"error": "Request for unknown model: 'nope' is not found (ModelNotFound)"}
    assert "404" in str(error)


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v2/models/nope/infer", {"inputs": [1]}, 404),
        ("/v2/models/m/infer", {"nothing": 1}, 400),
        ("/v2/models/m/nope", {"inputs": [1]}, 400),
        ("/v2/models/bad/infer", {"inputs": [1]}, 500),
    ],
)
def test_silent_returns_the_response_object(
    server: GraphServer, path: str, body: Any, status: int
) -> None:
    with pytest.raises(ServingRequestError) as info:
        server.test(path, body=body)
    assert info.value.status_code == status
    response = server.test(path, body=body, silent=True)
    assert isinstance(response, Response)
    assert response.status_code == status
    assert response.body == info.value.body
    assert set(response.body) == {"error"}


def test_silent_with_success_returns_the_body(server: GraphServer) -> None:
    assert server.test("/v2/models/m/infer", body={"inputs": [1]}, silent=True)["outputs"] == [2]


def test_get_body_false_returns_the_encoded_response(server: GraphServer) -> None:
    response = server.test("/v2/models/m/infer", body={"id": "x", "inputs": [3]}, get_body=False)
    assert isinstance(response, Response)
    assert response.status_code == 200
    assert response.content_type == "application/json"
    assert isinstance(response.body, bytes)
    assert loads(response.body)["outputs"] == [6]


def test_get_body_false_with_an_error_still_raises_unless_silent(server: GraphServer) -> None:
    with pytest.raises(ServingRequestError):
        server.test("/v2/models/nope", get_body=False)
    response = server.test("/v2/models/nope", get_body=False, silent=True)
    assert response.status_code == 404
    assert loads(response.body)["error"].endswith("(ModelNotFound)")


def test_test_passes_headers_id_and_trigger_to_the_event(server: GraphServer) -> None:
    answer = server.test(
        "/v2/models/m/event",
        body={"a": 1},
        headers={"X-Custom": "v"},
        event_id="ev-1",
        trigger="kafka",
    )
    assert answer["headers"] == {"x-custom": "v"}
    assert answer["id"] == "ev-1"
    assert answer["trigger"] == "kafka"
    assert answer["path"] == "event"


def test_the_body_is_returned_as_a_client_decodes_it(server: GraphServer) -> None:
    answer = server.test("/v2/models/m/infer", body={"inputs": [(1, 2)]})
    assert answer["outputs"] == [[1, 2, 1, 2]]  # tuples come back as JSON lists


def test_test_without_a_graph_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no models or steps were set"):
        GraphServer().test("/")
    with pytest.raises(ValueError, match="no models or steps were set"):
        GraphServer().init_object()


# ---- body parsing ----


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "application/json",
        "application/json; charset=utf-8",
        "text/json",
        "APPLICATION/JSON",
    ],
)
@pytest.mark.parametrize("encode", [str, str.encode])
def test_str_and_bytes_bodies_are_parsed_as_json(
    server: GraphServer, content_type: str | None, encode: Any
) -> None:
    answer = server.test(
        "/v2/models/m/infer", body=encode('{"inputs": [1, 2]}'), content_type=content_type
    )
    assert answer["outputs"] == [2, 4]


@pytest.mark.parametrize(
    "content_type", ["application/json", "text/json", "application/json; charset=utf-8"]
)
@pytest.mark.parametrize("body", ['{"inputs": [1', "not json", b"\xff\xfe", "{'a': 1}"])
def test_bad_json_with_a_json_content_type_is_400(
    server: GraphServer, content_type: str, body: Any
) -> None:
    response = server.test("/v2/models/m/infer", body=body, content_type=content_type, silent=True)
    assert response.status_code == 400
    assert response.body["error"].startswith("InvalidInput: invalid JSON: ")


def test_bad_json_without_a_content_type_keeps_the_raw_body(server: GraphServer) -> None:
    assert server.test("/v2/models/m/echo", body="plain words") == "plain words"
    response = server.test("/v2/models/m/infer", body="plain words", silent=True)
    assert response.status_code == 400  # inference needs JSON: the parser says what is wrong
    assert response.body["error"].startswith("InvalidInput: invalid JSON: unexpected character")


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", "hello there"),
        ("application/octet-stream", b"raw bytes"),
        ("text/csv", "a,b\n1,2"),
        ("application/x-www-form-urlencoded", "a=1&b=2"),
    ],
)
def test_other_content_types_keep_the_raw_body(
    server: GraphServer, content_type: str, body: Any
) -> None:
    answer = server.test("/v2/models/m/event", body=body, content_type=content_type)
    expected = body.decode() if isinstance(body, bytes) else body
    assert answer["body"] == expected
    assert answer["content_type"] == content_type


@pytest.mark.parametrize(
    "content_type", ["application/x-www-form-urlencoded", "text/plain", "application/octet-stream"]
)
def test_a_json_body_under_another_content_type_is_read_as_json(
    server: GraphServer, content_type: str
) -> None:
    # `curl -d '{...}'` sends application/x-www-form-urlencoded: the router reads JSON anyway.
    answer = server.test(
        "/v2/models/m/infer", body=b'{"inputs": [1, 2]}', content_type=content_type
    )
    assert answer["outputs"] == [2, 4]


def test_a_text_answer_is_sent_as_text_and_bytes_as_octets(server: GraphServer) -> None:
    text = server.test("/v2/models/m/echo", body="hello", content_type="text/plain", get_body=False)
    assert (text.body, text.content_type) == (b"hello", "text/plain")
    raw = server.test(
        "/v2/models/m/echo",
        body=b"\x00\x01",
        content_type="application/octet-stream",
        get_body=False,
    )
    assert (raw.body, raw.content_type) == (b"\x00\x01", "application/octet-stream")


def test_default_content_type_forces_json_parsing() -> None:
    forced = serve({"m": Multiplier}, spec={"default_content_type": "application/json"})
    response = forced.test("/v2/models/m/echo", body="plain words", silent=True)
    assert response.status_code == 400
    assert response.body["error"].startswith("InvalidInput: invalid JSON: ")
    assert forced.test("/v2/models/m/infer", body='{"inputs": [4]}')["outputs"] == [4]
    seen = forced.test("/v2/models/m/event", body='{"a": 1}')
    assert (seen["body"], seen["content_type"]) == ({"a": 1}, "application/json")
    # an explicit content type still wins
    assert forced.test("/v2/models/m/echo", body="raw", content_type="text/plain") == "raw"


def test_dict_bodies_are_not_touched(server: GraphServer) -> None:
    assert server.test("/v2/models/m/echo", body={"k": [1, "2"]}, content_type="text/plain") == {
        "k": [1, "2"]
    }


# ---- errors ----


def test_verbose_adds_a_traceback_to_errors() -> None:
    verbose = serve({"bad": Raising}, verbose=True)
    response = verbose.test("/v2/models/bad/infer", body={"inputs": [1]}, silent=True)
    assert response.body["error"] == "ValueError: model code broke"
    assert "Traceback" in response.body["traceback"]
    assert "model code broke" in response.body["traceback"]


def test_an_error_answers_and_the_server_keeps_serving(server: GraphServer) -> None:
    for _ in range(5):
        assert (
            server.test("/v2/models/bad/infer", body={"inputs": [1]}, silent=True).status_code
            == 500
        )
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [2]


# ---- load_mode async ----


@pytest.mark.parametrize("trigger", [None, "", "http", "grpc"])
def test_async_load_is_503_for_http_like_triggers(trigger: str | None) -> None:
    gate = f"http-like-{trigger}"
    GatedLoad.gate(gate)
    server = serve({"m": (GatedLoad, {"gate": gate})}, spec={"load_mode": "async"})
    response = server.test("/v2/models/m/infer", body={"inputs": [1]}, trigger=trigger, silent=True)
    assert (response.status_code, response.body) == (
        503,
        {"error": "ModelNotReady: model m is not ready yet"},
    )
    GatedLoad.gate(gate).set()


@pytest.mark.parametrize("trigger", ["kafka", "kafka-cluster", "v3ioStream", "cron"])
def test_async_load_makes_stream_triggers_wait_then_run(trigger: str) -> None:
    gate = GatedLoad.gate(f"stream-{trigger}")
    server = serve(
        {"m": (GatedLoad, {"gate": f"stream-{trigger}", "multiplier": 3})},
        spec={"load_mode": "async"},
    )
    answers: list[Any] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            server.test("/v2/models/m/infer", body={"inputs": [2]}, trigger=trigger, silent=True)
        )
    )
    sender.start()
    sender.join(0.3)
    assert sender.is_alive(), answers
    gate.set()
    sender.join(10)
    assert answers[0]["outputs"] == [6]
    assert model_of(server, "m").ready


def test_load_mode_sync_is_the_default() -> None:
    server = serve({"m": Multiplier})
    assert server.load_mode == "sync"
    assert model_of(server, "m").ready


# ---- run() ----


def test_run_returns_an_encoded_response_or_the_body(server: GraphServer) -> None:
    encoded = server.run(Event(body={"inputs": [5]}, path="/v2/models/m/infer"))
    assert encoded.status_code == 200
    assert loads(encoded.body)["outputs"] == [10]
    body = server.run(Event(body={"inputs": [5]}, path="/v2/models/m/infer"), get_body=True)
    assert body["outputs"] == [10]
    failed = server.run(Event(body={"inputs": [5]}, path="/v2/models/x/infer"), get_body=True)
    assert isinstance(failed, Response) and failed.status_code == 404


async def test_run_async_is_the_one_code_path(server: GraphServer) -> None:
    response = await server.run_async(Event(body={"inputs": [1]}, path="/v2/models/m/infer"))
    assert response.status_code == 200
    assert response.body["outputs"] == [2]
    response = await server.run_async(
        Event(body=b"{bad", content_type="application/json", path="/v2/models/m/infer")
    )
    assert response.status_code == 400


def test_create_graph_server_from_a_graph_dict() -> None:
    fn = mlserve.new_function("f")
    fn.add_model("m", class_name="tests.fixtures.Multiplier", multiplier=6)
    server = create_graph_server(graph=fn.spec.graph.to_dict(), parameters={"p": 1})
    server.init_states()
    server.init_object()
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [6]
    assert server.context.get_param("p") == 1


def test_shutdown_callbacks_run_at_wait_for_completion() -> None:
    server = serve({"m": Multiplier})
    calls: list[str] = []
    server.on_shutdown(lambda: calls.append("flushed"))
    server.wait_for_completion()
    assert calls == ["flushed"]


def test_server_handlers_answer_before_the_graph() -> None:
    server = serve({"m": Multiplier})

    async def ping(srv: GraphServer, event: Event) -> Response | None:
        return Response({"pong": True}) if event.path == "/ping" else None

    server.add_handler(ping)
    assert server.test("/ping") == {"pong": True}
    assert server.test("/v2/models/m/infer", body={"inputs": [1]})["outputs"] == [1]


def test_a_handler_that_answers_only_some_paths_is_offered_only_those() -> None:
    server = serve({"m": Multiplier})
    offered: list[tuple[str, str]] = []

    @answers_only(lambda method, path: path.startswith("/ping"))
    async def ping(srv: GraphServer, event: Event) -> Response | None:
        offered.append((event.method, event.path))
        return Response({"pong": True}) if event.path == "/ping" else None

    assert server.test("/v2/models/m/infer", body={"inputs": [2]})["outputs"] == [2]
    server.add_handler(ping)  # after a request: the paths' choice is made again
    for _ in range(2):
        assert server.test("/v2/models/m/infer", body={"inputs": [3]})["outputs"] == [3]
        assert server.test("/ping") == {"pong": True}
    assert server.test("/v2/models/m/infer", body={"inputs": [4]})["outputs"] == [4]
    with pytest.raises(ServingRequestError):
        server.test("/ping/other")  # offered, declined: the graph's 404
    assert offered == [("GET", "/ping"), ("GET", "/ping"), ("GET", "/ping/other")]
