"""The stream faces split alike: a Kafka message's key (or its routing header) and a
nuclio event's header reach the variant the mock server picks for the same key."""

from __future__ import annotations

import json
import logging
from typing import Any

import nuclio_sdk
import pytest
from confluent_kafka import Message

import mlserve
from mlserve.kafka.trigger import to_event
from mlserve.runtimes import nuclio as runtime
from tests.fixtures import Multiplier

KEYS = [f"user-{i}" for i in range(40)]


def _function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("ab-streams")
    for i, weight in enumerate((50, 30, 20)):
        fn.add_model(f"m:v{i + 1}", class_name=Multiplier, multiplier=i + 1, weight=weight)
    return fn


@pytest.fixture(scope="module")
def expected() -> dict[str, str]:
    server = _function().to_mock_server()
    return {
        key: server.test(
            "/v2/models/m/infer", {"inputs": [1]}, headers={"x-mlserve-route-key": key}
        )["parameters"]["route"]
        for key in KEYS
    }


def _route(answer: Any) -> str:
    body = json.loads(answer) if isinstance(answer, bytes | str) else answer
    route: str = body["parameters"]["route"]
    return route


def test_a_kafka_message_key_or_header_routes_it(expected: dict[str, str]) -> None:
    server = _function().to_mock_server()
    value = json.dumps({"model": "m", "inputs": [1]}).encode()
    by_key, by_header = {}, {}
    for key in KEYS:
        message = Message(topic="in", partition=0, offset=1, key=key.encode(), value=value)
        by_key[key] = _route(server.run(to_event(message), get_body=True))
        headers = [("x-mlserve-route-key", key.encode())]
        message = Message(topic="in", partition=0, offset=2, value=value, headers=headers)
        by_header[key] = _route(server.run(to_event(message), get_body=True))
    assert by_key == expected and by_header == expected


def test_a_nuclio_event_header_routes_it(
    expected: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(runtime.SPEC_ENV, json.dumps(_function().to_dict()))
    context = nuclio_sdk.Context(
        logger=nuclio_sdk.Logger(logging.DEBUG, name="test-rollout"),
        worker_id=0,
        trigger=nuclio_sdk.TriggerInfo("http", "http"),
    )
    runtime.init_context(context)
    seen = {}
    for key in KEYS:
        event = nuclio_sdk.Event(
            body=json.dumps({"inputs": [1]}).encode(),
            content_type="application/json",
            path="/v2/models/m/infer",
            method="POST",
            trigger=nuclio_sdk.TriggerInfo("http", "my-http"),
            headers={"Content-Type": "application/json", "X-Mlserve-Route-Key": key},
        )
        response = runtime.handler(context, event)
        assert response.headers["x-mlserve-route"] == _route(response.body)
        seen[key] = _route(response.body)
    assert seen == expected
