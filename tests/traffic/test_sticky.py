"""Sticky A/B/N in the mock server: the same routing key reaches the same variant,
changing one weight moves only the keys it must, a variant may be forced."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import mlserve
from mlserve.core.events import Event
from mlserve.graph.traffic import Variants
from mlserve.server.graph_server import ServingRequestError
from tests.fixtures import Multiplier

KEYS = [f"user-{i}" for i in range(5_000)]


def _server(**router: Any) -> mlserve.GraphServer:
    fn = mlserve.new_function("ab")
    fn.set_topology("router", **router)
    for i, weight in enumerate((50, 30, 20)):
        fn.add_model(f"m:v{i + 1}", class_name=Multiplier, multiplier=i + 1, weight=weight)
    return fn.to_mock_server()


def _variant(server: mlserve.GraphServer, key: str) -> str:
    headers = {"x-mlserve-route-key": key}
    answer = server.test("/v2/models/m/infer", {"inputs": [1]}, headers=headers)
    route: str = answer["parameters"]["route"]
    return route


def test_the_same_key_reaches_the_same_variant() -> None:
    server = _server()
    first = {key: _variant(server, key) for key in KEYS[:500]}
    for _ in range(3):
        assert {key: _variant(server, key) for key in KEYS[:500]} == first
    counts = Counter(first.values())
    assert set(counts) == {"m:v1", "m:v2", "m:v3"}  # N variants, not two
    again = _server()
    assert {key: _variant(again, key) for key in KEYS[:500]} == first


def test_keys_spread_by_weight() -> None:
    variants = Variants.of("m", {"m:v1": 50, "m:v2": 30, "m:v3": 20})
    counts = Counter(variants.pick(key) for key in KEYS)
    for key, share in (("m:v1", 0.5), ("m:v2", 0.3), ("m:v3", 0.2)):
        assert abs(counts[key] / len(KEYS) - share) < 0.03, counts


def test_changing_one_weight_moves_only_the_keys_it_must() -> None:
    before = Variants.of("m", {"m:v1": 90, "m:v2": 10})
    after = Variants.of("m", {"m:v1": 90, "m:v2": 20})
    moved = [key for key in KEYS if before.pick(key) != after.pick(key)]
    # the canary's share goes from 10% to 18.2%: 8.2% of the keys must move, all to it
    minimal = 20 / 110 - 10 / 100
    assert {after.pick(key) for key in moved} == {"m:v2"}
    assert abs(len(moved) / len(KEYS) - minimal) < 0.02, len(moved)
    three = Variants.of("m", {"m:v1": 50, "m:v2": 30, "m:v3": 20})
    raised = Variants.of("m", {"m:v1": 50, "m:v2": 30, "m:v3": 40})
    moved = [key for key in KEYS if three.pick(key) != raised.pick(key)]
    assert {raised.pick(key) for key in moved} == {"m:v3"}  # none moves between v1 and v2
    assert abs(len(moved) / len(KEYS) - (40 / 120 - 20 / 100)) < 0.02


def test_a_weight_change_through_the_router_keeps_unmoved_keys() -> None:
    server = _server()
    before = {key: _variant(server, key) for key in KEYS[:1_000]}
    server.graph.set_weights("m", {"v3": 40})  # type: ignore[union-attr]
    after = {key: _variant(server, key) for key in KEYS[:1_000]}
    assert {after[key] for key in KEYS[:1_000] if before[key] != after[key]} == {"m:v3"}


def test_the_key_may_come_from_a_request_field() -> None:
    server = _server(route_key="parameters.user")
    for key in KEYS[:200]:
        body = {"inputs": [1], "parameters": {"user": key}}
        answer = server.test("/v2/models/m/infer", body)
        assert answer["parameters"]["route"] == _variant(server, key)


def test_a_stream_message_key_is_a_routing_key() -> None:
    """The Kafka trigger and nuclio hand a message's key as ``event.key``."""
    server = _server()
    for key in KEYS[:200]:
        event = Event({"model": "m", "inputs": [1]}, path="/", method="POST", trigger="kafka")
        event.key = key
        answer = server.run(event, get_body=True)
        assert answer["parameters"]["route"] == _variant(server, key)


def test_a_variant_is_forced_only_when_the_router_allows_it() -> None:
    allowed = _server(allow_forced_route=True)
    for forced in ("v3", "m:v3"):
        answer = allowed.test(
            "/v2/models/m/infer", {"inputs": [1]}, headers={"X-MLServe-Route": forced}
        )
        assert answer["parameters"]["route"] == "m:v3" and answer["outputs"] == [3]
    with pytest.raises(ServingRequestError) as refused:
        allowed.test("/v2/models/m/infer", {"inputs": [1]}, headers={"x-mlserve-route": "v9"})
    assert refused.value.status_code == 400
    plain = _server()
    routes = {
        plain.test("/v2/models/m/infer", {"inputs": [1]}, headers={"x-mlserve-route": "v3"})[
            "parameters"
        ]["route"]
        for _ in range(200)
    }
    assert len(routes) > 1  # the header is ignored: the split decides


def test_the_answer_names_the_variant_in_a_header() -> None:
    server = _server()
    event = Event({"inputs": [1]}, path="/v2/models/m/infer", method="POST")
    event.headers = {"x-mlserve-route-key": "user-1"}
    response = server.run(event)
    assert response.headers["x-mlserve-route"] == _variant(server, "user-1")
