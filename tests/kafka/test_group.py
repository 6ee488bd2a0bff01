"""``mlserve serve --kafka``: three processes of one group on a 4-partition topic,
one killed mid-run, on the real tansu broker."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.kafka import topics
from tests.netserver import ROOT, ServerProcess, start_server
from tests.services import ProcessService

FN = "tests/kafka/fn.py"
MESSAGES = 10_000


def _member(source: str, brokers: str, group: str, output: str, dead: str) -> ServerProcess:
    return start_server(
        "--kafka",
        f"{source}@{brokers}",
        "--group",
        group,
        "--output-topic",
        output,
        "--dead-letter-topic",
        dead,
        target=FN,
    )


def _owns_partitions(member: ServerProcess) -> bool:
    """Its /metrics shows a consumer lag: it was given partitions and read them."""
    text = httpx.get(f"{member.url}/metrics", timeout=10).text
    return re.search(r"^mlserve_kafka_consumer_lag\{", text, re.M) is not None


def _owned(member: ServerProcess) -> set[str]:
    """The partitions whose lag the worker answering /metrics (a new connection) reports."""
    text = httpx.get(f"{member.url}/metrics", timeout=10).text
    return set(re.findall(r'^mlserve_kafka_consumer_lag\{partition="(\d+)"', text, re.M))


def _wait(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_three_members_one_killed_every_message_has_a_result(kafka: ProcessService) -> None:
    tag = uuid.uuid4().hex[:8]
    source, output, dead, group = f"in-{tag}", f"out-{tag}", f"dead-{tag}", f"group-{tag}"
    warmup = json.dumps({"model": "double", "inputs": [0]}).encode()
    producer = Producer({"bootstrap.servers": kafka.url})
    for partition in range(topics.PARTITIONS):  # creates the topic; every partition has one
        producer.produce(source, warmup, b"warmup", partition=partition)
    assert producer.flush(30) == 0

    members = [_member(source, kafka.url, group, output, dead) for _ in range(3)]
    try:
        _wait(lambda: all(_owns_partitions(m) for m in members), 60, "3 members with partitions")
        messages = [
            (str(i).encode(), json.dumps({"model": "double", "inputs": [i]}).encode(), [])
            for i in range(MESSAGES)
        ]
        messages.insert(MESSAGES // 2, (b"malformed", b"\x00 not json", []))
        topics.produce(kafka.url, source, messages)

        reader = Consumer({"bootstrap.servers": kafka.url, "group.id": "reader"})
        reader.assign([TopicPartition(output, p, 0) for p in range(topics.PARTITIONS)])
        seen: Counter[bytes] = Counter()
        pids_before: set[int] = set()
        pids_after: set[int] = set()
        owners: dict[int, set[int]] = {}  # input partition -> pids that answered from it
        victim: ServerProcess | None = None
        deadline = time.monotonic() + 150
        try:
            while time.monotonic() < deadline and len(seen) < MESSAGES + 1:
                message = reader.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                seen[message.key()] += 1
                pid = json.loads(message.value())["pid"]
                (pids_after if victim else pids_before).add(pid)
                if message.key() != b"warmup":  # answered once the 3 members had partitions
                    partition = int(dict(message.headers())["mlserve-source"].split(b"/")[1])
                    owners.setdefault(partition, set()).add(pid)
                if victim is None and len(seen) >= MESSAGES // 10:
                    victim = next(m for m in members if m.proc.pid in pids_before)
                    victim.proc.send_signal(signal.SIGKILL)  # no commit, no goodbye
        finally:
            reader.close()
        assert victim is not None
        assert victim.proc.wait(10) == -signal.SIGKILL

        missing = [i for i in range(MESSAGES) if str(i).encode() not in seen]
        duplicates = sum(count - 1 for key, count in seen.items() if key != b"warmup")
        print(f"results: {len(seen)} keys, {duplicates} duplicates, missing {len(missing)}")
        print(f"input partitions and the pids that answered them: {owners}")
        assert missing == []
        assert seen[b"malformed"] == 0
        survivors = [m for m in members if m is not victim]
        assert {m.proc.pid for m in survivors} <= pids_after  # both went on after the kill
        victims = [p for p, pids in owners.items() if victim.proc.pid in pids]
        assert victims  # the victim owned partitions
        # A survivor finished what the victim left (no message is missing, above); a partition
        # the victim had already finished when it was killed has nothing left to take over.
        taken_over = [p for p in victims if owners[p] - {victim.proc.pid}]
        assert taken_over, f"none of the victim's partitions {victims} was taken over"

        letters = topics.read(kafka.url, dead, 1, 30)
        assert [m.key() for m in letters] == [b"malformed"]
        assert dict(letters[0].headers())["mlserve-status"] == b"400"

        metrics = [httpx.get(f"{m.url}/metrics", timeout=10).text for m in survivors]
        assert any("mlserve_kafka_dead_lettered_total" in text for text in metrics)
        for member in survivors:  # SIGTERM: finish, commit, leave the group, exit 0
            member.proc.send_signal(signal.SIGTERM)
        assert [m.proc.wait(60) for m in survivors] == [0, 0]
    finally:
        for member in members:
            member.stop()


def test_sigterm_finishes_commits_and_leaves_then_a_new_member_reruns_nothing(
    kafka: ProcessService,
) -> None:
    """A member stopped mid-run commits what it ran: the member after it runs only the
    rest, so no message has two results."""
    tag = uuid.uuid4().hex[:8]
    source, output, dead, group = f"in-{tag}", f"out-{tag}", f"dead-{tag}", f"group-{tag}"
    count = 50_000  # enough that a SIGTERM after the first results lands mid-run
    topics.produce(
        kafka.url,
        source,
        [
            (str(i).encode(), json.dumps({"model": "double", "inputs": [i]}).encode(), [])
            for i in range(count)
        ],
    )
    first = _member(source, kafka.url, group, output, dead)
    try:
        _wait(lambda: len(topics.read(kafka.url, output, 1, 0.5)) > 0, 60, "first results")
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(60) == 0
    finally:
        first.stop()
    done_by_first = len(topics.read(kafka.url, output, 1, 5))
    assert 0 < done_by_first < count  # stopped mid-run
    second = _member(source, kafka.url, group, output, dead)
    try:
        results = topics.read(kafka.url, output, count, 90)
    finally:
        second.stop()
    keys = Counter(m.key() for m in results)
    assert len(keys) == count
    assert [k for k, n in keys.items() if n > 1] == []  # the first member's commits held


def test_bad_kafka_options_end_with_one_line() -> None:
    for args, said in [
        (["--kafka", "just-a-topic", "--group", "g"], "TOPIC@BROKERS"),
        (["--kafka", "t@127.0.0.1:9"], "--group"),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "mlserve", "serve", FN, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_each_worker_of_workers_2_is_a_member(kafka: ProcessService) -> None:
    tag = uuid.uuid4().hex[:8]
    source, output, dead, group = f"in-{tag}", f"out-{tag}", f"dead-{tag}", f"group-{tag}"
    body = json.dumps({"model": "double", "inputs": [1]}).encode()
    producer = Producer({"bootstrap.servers": kafka.url})
    for partition in range(topics.PARTITIONS):
        producer.produce(source, body, b"warmup", partition=partition)
    assert producer.flush(30) == 0
    server = start_server(
        "--workers", "2", "--kafka", f"{source}@{kafka.url}", "--group", group,
        "--output-topic", output, "--dead-letter-topic", dead, target=FN,
    )  # fmt: skip
    try:
        # A worker's lag gauges name the partitions it owns: 2 of 4 once both are members.
        _wait(lambda: len(_owned(server)) == 2, 60, "both workers joined")
        topics.produce(kafka.url, source, [(str(i).encode(), body, []) for i in range(400)])
        results = topics.read(kafka.url, output, 404, 60)
    finally:
        assert server.stop() == 0
    keys = {m.key() for m in results}
    assert len(keys - {b"warmup"}) == 400
    assert len({json.loads(m.value())["pid"] for m in results}) == 2  # both consumed
