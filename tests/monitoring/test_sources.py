"""Reading the model-log stream back (docs/monitoring.md#reading-the-stream-back): what
each real target wrote comes back once, and a committed position survives a reopen."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from mlserve.monitoring.sources import (
    FileSource,
    KafkaSource,
    Message,
    RedisSource,
    open_source,
)
from mlserve.monitoring.streams.file import FileStream
from mlserve.monitoring.streams.kafka import KafkaStream
from mlserve.monitoring.streams.redis import RedisStream
from tests.monitoring.conftest import unique


def records(start: int, count: int, models: int = 1) -> list[dict[str, Any]]:
    return [{"model": f"m{i % models}", "i": i} for i in range(start, start + count)]


def numbers(messages: list[Message]) -> list[int]:
    return [json.loads(message.value)["i"] for message in messages]


def read_until(source: Any, count: int, timeout: float = 20.0) -> list[Message]:
    found: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(found) < count:
        assert time.monotonic() < deadline, f"read {len(found)} of {count}"
        found += source.poll(1000, 0.1)
    return found


# -- file ---------------------------------------------------------------------------


def test_open_source_picks_by_scheme_and_refuses_what_cannot_be_read(tmp_path: Path) -> None:
    for url in (str(tmp_path / "a.jsonl"), f"file://{tmp_path}/a.jsonl"):
        source = open_source(url)
        assert isinstance(source, FileSource)
        assert source.name == f"file:{tmp_path}/a.jsonl"
        assert source.assigned() == {0}
    with pytest.raises(ValueError, match="cannot be read back"):
        open_source("http://127.0.0.1:9/logs")
    with pytest.raises(ValueError, match=r"no stream source for 'nope://' \(known: file://"):
        open_source("nope://x")


def test_file_source_tails_what_the_file_stream_appends(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    stream = FileStream(str(path))
    source = open_source(str(path))

    def write() -> None:
        for start in range(0, 300, 10):
            stream.push(records(start, 10))
            time.sleep(0.005)

    writer = threading.Thread(target=write)
    writer.start()
    found = read_until(source, 300)
    writer.join()
    assert numbers(found) == list(range(300))
    assert found[-1].position == path.stat().st_size
    assert {m.partition for m in found} == {0}

    with open(path, "ab") as out:  # another writer, half way through a line
        out.write(b'{"model": "m0", ')
        out.flush()
        assert source.poll(10, 0.2) == []
        out.write(b'"i": 300}\n\n')  # a blank line is no record
    (last,) = source.poll(10, 1.0)
    assert json.loads(last.value)["i"] == 300
    assert last.position == path.stat().st_size - 1
    stream.close()
    source.close()


def test_a_committed_offset_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    stream = FileStream(str(path))
    stream.push(records(0, 10))
    source = open_source(str(path), group="g1")
    first = source.poll(4, 1.0)
    assert numbers(first) == [0, 1, 2, 3]
    source.commit({0: first[-1].position})
    assert numbers(source.poll(100, 1.0)) == list(range(4, 10))  # read, not committed
    source.close()
    assert json.loads((tmp_path / "logs.jsonl.g1.offset").read_text()) == {
        "offset": first[-1].position
    }

    again = open_source(str(path), group="g1")
    assert numbers(again.poll(100, 1.0)) == list(range(4, 10))
    again.close()
    (tmp_path / "logs.jsonl.g3.offset").write_text("{not json")
    for group in ("g2", "g3"):  # a group of its own, or an unreadable offset: from 0
        other = open_source(str(path), group=group)
        assert numbers(other.poll(100, 1.0)) == list(range(10))
        other.close()
    stream.close()


def test_a_truncated_file_is_read_from_the_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "logs.jsonl"
    stream = FileStream(str(path))
    stream.push(records(0, 10))
    stream.close()
    source = open_source(str(path))
    found = source.poll(100, 1.0)
    source.commit({0: found[-1].position})

    path.write_bytes(b"")  # truncated while the source tails it
    FileStream(str(path)).push(records(100, 2))
    with caplog.at_level(logging.WARNING, "mlserve.monitoring.sources"):
        assert numbers(read_until(source, 2)) == [100, 101]
    assert "truncated or replaced" in caplog.text
    source.close()

    caplog.clear()
    with caplog.at_level(logging.WARNING, "mlserve.monitoring.sources"):
        reopened = open_source(str(path))  # the saved offset is past the end now
        assert numbers(reopened.poll(100, 1.0)) == [100, 101]
    assert "shorter" in caplog.text
    reopened.close()


def test_the_source_waits_for_the_file_to_appear(tmp_path: Path) -> None:
    path = tmp_path / "later" / "logs.jsonl"
    source = open_source(f"file://{path}")
    started = time.monotonic()
    assert source.poll(10, 0.3) == []
    assert time.monotonic() - started >= 0.3
    stream = FileStream(str(path))
    stream.push(records(0, 3))
    assert numbers(read_until(source, 3)) == [0, 1, 2]
    stream.close()
    source.close()


# -- Redis --------------------------------------------------------------------------


def test_redis_source_reads_back_and_resumes_at_the_commit(redis_server: Any) -> None:
    stream_name = unique("logs")
    url = f"{redis_server.url}/0?stream={stream_name}"
    stream = RedisStream(url)
    stream.push(records(0, 10))
    source = open_source(url, group="monitor")
    assert isinstance(source, RedisSource)
    assert source.name == f"{redis_server.url}/0?stream={stream_name}"
    first = source.poll(4, 1.0)
    assert numbers(first) == [0, 1, 2, 3]
    assert all(isinstance(m.position, str) and "-" in m.position for m in first)
    source.commit({0: first[-1].position})
    assert numbers(source.poll(100, 1.0)) == list(range(4, 10))
    started = time.monotonic()
    assert source.poll(100, 0.3) == []  # blocks up to the timeout
    assert time.monotonic() - started >= 0.25
    source.close()

    again = open_source(url, group="monitor")
    assert numbers(again.poll(100, 1.0)) == list(range(4, 10))
    stream.push(records(10, 2))
    assert numbers(again.poll(100, 1.0)) == [10, 11]
    again.close()
    stream.close()


# -- Kafka --------------------------------------------------------------------------


class Member:
    """A KafkaSource of a group and the records it keeps: those of a revoked partition
    are dropped, as the monitor drops its open windows."""

    def __init__(self, url: str, group: str) -> None:
        fast: dict[str, Any] = {"session.timeout.ms": 6000}  # a closed member leaves soon
        self.source = KafkaSource(url, group, **fast)
        self.kept: dict[int, list[Message]] = defaultdict(list)
        self.revoked: list[list[int]] = []
        self.source.on_revoke = self._revoked

    def _revoked(self, partitions: list[int]) -> None:
        self.revoked.append(partitions)
        for partition in partitions:
            self.kept.pop(partition, None)

    def poll(self) -> None:
        for message in self.source.poll(500, 0.1):
            self.kept[message.partition].append(message)

    def numbers(self) -> list[int]:
        return [n for messages in self.kept.values() for n in numbers(messages)]

    def positions(self) -> dict[int, int | str]:
        return {p: messages[-1].position for p, messages in self.kept.items() if messages}


def settle(members: list[Member], count: int, partitions: int = 4, timeout: float = 60.0) -> None:
    """Poll every member until they hold every partition and ``count`` records between
    them, then a while longer (a repeat would show)."""
    deadline = time.monotonic() + timeout
    while True:
        for member in members:
            member.poll()
        held = [member.source.assigned() for member in members]
        kept = sum(len(member.numbers()) for member in members)
        if all(held) and len(set().union(*held)) == partitions and kept >= count:
            break
        assert time.monotonic() < deadline, f"held {held}, kept {kept} of {count}"
    for _ in range(5):
        for member in members:
            member.poll()


def rebalanced(member: Member, seen: int, timeout: float = 30.0) -> None:
    """Poll until a rebalance after the ``seen`` first took the member's partitions
    (and so dropped what it kept)."""
    deadline = time.monotonic() + timeout
    while len(member.revoked) == seen:
        assert time.monotonic() < deadline, "no rebalance"
        member.poll()


def two_members(kafka: Any, count: int) -> tuple[str, list[Member]]:
    topic = unique("logs")
    url = f"kafka://{kafka.url}?topic={topic}"
    KafkaStream(url).push(records(0, count, models=16))  # 16 keys over 4 partitions
    group = unique("group")
    members = [Member(url, group), Member(url, group)]
    settle(members, count)
    together = Counter(members[0].numbers() + members[1].numbers())
    assert together == Counter(range(count))  # every record exactly once
    for member in members:
        assert set(member.kept) <= member.source.assigned()
    return url, members


def test_kafka_members_resume_from_what_a_closed_member_committed(kafka: Any) -> None:
    url, (a, b) = two_members(kafka, 40)
    assert a.source.name.startswith("kafka:logs")
    reread: list[int] = []  # what the commit of ``a`` leaves unread, per partition
    committed: dict[int, int | str] = {}
    for partition, messages in a.kept.items():
        cut = len(messages) // 2
        if cut:
            committed[partition] = messages[cut - 1].position
        reread += numbers(messages[cut:])
    a.source.commit(committed)
    b.source.commit(b.positions())
    seen = len(a.revoked), len(b.revoked)
    a.source.close()
    assert len(a.revoked) > seen[0]  # closing hands the partitions back

    KafkaStream(url).push(records(40, 10, models=16))
    rebalanced(b, seen[1])  # the rebalance takes b's partitions too, then gives it all four
    settle([b], len(reread) + 10)
    assert b.source.assigned() == {0, 1, 2, 3}
    assert Counter(b.numbers()) == Counter(reread + list(range(40, 50)))
    b.source.close()


def test_kafka_records_of_a_member_that_never_committed_are_read_again(kafka: Any) -> None:
    url, (a, b) = two_members(kafka, 30)
    theirs = a.numbers()
    b.source.commit(b.positions())
    a.source.commit({partition: 1 for partition in b.source.assigned()})  # not a's: skipped
    seen = len(b.revoked)
    a.source.close()
    rebalanced(b, seen)
    settle([b], len(theirs))
    assert b.source.assigned() == {0, 1, 2, 3}
    assert Counter(b.numbers()) == Counter(theirs)
    b.source.close()
