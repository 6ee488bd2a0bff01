"""Queue steps: in memory, and a real Kafka topic (tansu) between two functions."""

from __future__ import annotations

import time

import mlserve
from mlserve import QueueConsumer
from tests.graph import models


def split_function(path: str | None) -> mlserve.ServingFunction:
    fn = mlserve.new_function("root")
    fn.add_child_function("f2")
    graph = fn.set_topology("flow", engine="sync")
    graph.to(name="prep", handler="tests.graph.models.inc").to(">>", name="q", path=path)
    graph.add_step(name="score", handler="tests.graph.models.double", after="q", function="f2")
    graph.add_step(name="rec", handler="tests.graph.models.record", after="score", function="f2")
    return fn


def test_in_memory_queue_passes_through() -> None:
    fn = split_function(None)
    assert fn.spec.function_refs == {"f2": {}}
    assert fn.to_mock_server().test(body=1) == 4
    assert models.seen == [4]


def test_child_function_runs_its_part_alone() -> None:
    fn = split_function(None)
    child = fn.to_mock_server(current_function="f2")
    assert [m for m in child.graph._local] == ["score", "rec"]
    assert child.test(body=10) == 20


def wait_for(count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(models.seen) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_kafka_queue_between_functions(kafka) -> None:  # type: ignore[no-untyped-def]
    fn = split_function(f"kafka://{kafka.url}?topic=graph-q1")
    root = fn.to_mock_server()
    child = fn.to_mock_server(current_function="f2")
    consumer = QueueConsumer(child).start()
    try:
        answers = [root.test(body=i, event_id=f"e{i}") for i in range(3)]
        assert answers == [{"id": "e0"}, {"id": "e1"}, {"id": "e2"}]
        wait_for(3)
        assert sorted(models.seen) == [2, 4, 6]  # (i + 1) * 2, in the child function
        assert consumer.processed == 3 and consumer.failed == 0
    finally:
        root.wait_for_completion()
        child.wait_for_completion()  # stops the consumer


def test_kafka_queue_with_brokers_option(kafka) -> None:  # type: ignore[no-untyped-def]
    fn = mlserve.new_function("root")
    graph = fn.set_topology("flow", engine="async")
    graph.to(name="prep", handler="tests.graph.models.inc").to(
        ">>", name="q", path="graph-q2", kafka_brokers=kafka.url
    )
    graph.add_step(name="rec", handler="tests.graph.models.record", after="q", function="f2")
    root = fn.to_mock_server()
    child = fn.to_mock_server(current_function="f2")
    consumer = QueueConsumer(child).start()
    try:
        assert root.test(body=41, event_id="x") == {"id": "x"}
        wait_for(1)
        assert models.seen == [42]
    finally:
        root.wait_for_completion()
        child.wait_for_completion()
    assert consumer.processed == 1
