"""Records written as JSON lines (file and Kafka targets) without building them as dicts:
the same bytes as the dict records, in call order, batched or not, and a stream that is
down never fails a request."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict, defaultdict
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import mlserve
from mlserve.core import clock
from mlserve.monitoring import pusher as pusher_module
from mlserve.monitoring import records as rec
from mlserve.monitoring.pusher import StreamPusher
from mlserve.monitoring.streams.memory import MemoryStream
from mlserve.protocol.tensors import dumps
from tests.monitoring.conftest import FailingModel, SumModel, wait_for

ROWS = {"inputs": [[1, 2], [3, 4]]}


class Model:
    """The attributes a record takes from a model."""

    def __init__(self, name: str, version: str = "", labels: dict[str, Any] | None = None):
        self.name, self.version, self.labels = name, version, labels


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


TENSOR = {"name": "x", "shape": [2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]}
CALLS = [
    (ROWS, {"id": "1", "outputs": [3, 7], "timestamp": "t"}, {}),
    ({"id": "2", "inputs": [TENSOR]}, {"outputs": [{**TENSOR, "name": "y"}]}, None),
    ({"inputs": [TENSOR, {**TENSOR, "name": "z"}]}, {"outputs": {"y": np.arange(4.0)}}, None),
    ({"inputs": np.ones((2, 2))}, {"outputs": np.int64(3)}, {"acc": np.float32(0.5)}),
    ("not a dict", None, {"n": 1}),
    ({"no": "inputs"}, ["not", "a", "dict"], {}),
    ({"inputs": []}, {"outputs": []}, None),
    ({"inputs": [{"a": 1}]}, {"outputs": [[1.5], [2.5]]}, None),
    (defaultdict(list, {"x": 1}), OrderedDict(outputs=[1, 2]), None),  # read, never changed
    (ROWS, {"outputs": [TENSOR]}, None),
    ({"inputs": [TENSOR]}, {"outputs": [1]}, None),
    (ROWS, "text", None),
]
STARTS = [
    datetime(2026, 11, 23, 12, 0, 0, 0, tzinfo=UTC),
    datetime(2026, 11, 23, 12, 0, 0, 999999, tzinfo=UTC),
    datetime(2026, 11, 23, 12, 0, 1, 5, tzinfo=UTC),
    datetime(2026, 11, 23, 12, 0, 0, 7, tzinfo=UTC),  # back to a second seen before
    datetime(2026, 11, 23, 14, 0, 0, 7, tzinfo=timezone(timedelta(hours=2))),
    datetime(2026, 11, 23, 12, 0, 0, 7),  # naive
]


def test_a_line_is_the_dict_record_encoded_byte_for_byte() -> None:
    for model in (Model("m"), Model("m", "v2", {"team": "a", "n": np.int32(1)})):
        fields = rec.ModelFields(model, 3, "proj/fn")
        for start in STARTS:
            for request, response, metrics in CALLS:
                call = rec.Call(model, start, request, response, "infer", 12, metrics)
                line = rec.success_line(fields, start, request, response, "infer", 12, metrics)
                assert line == dumps(rec.success_record(fields, call))
    assert dict(CALLS[8][0]) == {"x": 1}  # a defaultdict request is read, never written to


@given(st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-5))])))
def test_when_is_isoformat(start: datetime) -> None:
    assert clock.when(start) == start.isoformat(sep=" ", timespec="microseconds")


@given(st.lists(st.datetimes(min_value=datetime(2026, 1, 1)), min_size=2, max_size=20))
def test_when_of_utc_starts_in_any_order_is_isoformat(starts: list[datetime]) -> None:
    for start in (s.replace(tzinfo=UTC) for s in starts):
        assert clock.when(start) == start.isoformat(sep=" ", timespec="microseconds")


def test_when_of_starts_a_microsecond_apart_is_each_its_own_text() -> None:
    """Starts in one second share the second's cached text, never each other's."""
    for start in STARTS:
        again = start.replace(microsecond=(start.microsecond + 1) % 1_000_000)
        for value in (start, start, again, again, start):
            assert clock.when(value) == value.isoformat(sep=" ", timespec="microseconds")


@given(st.integers(min_value=0, max_value=2**62))
def test_when_ns_is_when_of_the_same_reading(ns: int) -> None:
    """The response's timestamp (from time_ns) and the record's when (from its datetime)
    of one call's start are the same text."""
    start = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    assert (
        clock.when_ns(ns) == clock.when(start) == start.isoformat(sep=" ", timespec="microseconds")
    )


@given(st.lists(st.integers(min_value=0, max_value=2**62), min_size=1, max_size=6))
def test_a_time_ns_start_is_written_as_its_datetime(readings: list[int]) -> None:
    """The model hands the pusher its time_ns() start: the record's when, and the start
    as a datetime (endpoint records), are those of the same reading, whatever came before
    (the last reading's text is cached: never another's)."""
    for ns in [*readings, *reversed(readings), *readings]:
        start = rec.at_ns(ns)
        assert start == datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
        assert clock.when(ns) == clock.when_ns(ns) == clock.when(start)
        assert rec.ns_of(start) == ns // 1000 * 1000 and rec.ns_of(ns) == ns


def test_a_naive_datetime_start_counts_as_utc() -> None:
    naive = datetime(2026, 11, 23, 12, 0, 0, 5)
    assert rec.at_ns(rec.ns_of(naive)) == naive.replace(tzinfo=UTC)


def test_success_line_of_a_time_ns_start_is_the_record_of_its_datetime() -> None:
    fields = rec.ModelFields(Model("m"), 0, "p/f")
    ns = 1_795_000_000_123_456_789
    line = rec.success_line(fields, ns, ROWS, {"outputs": [3, 7]}, "infer", 5)
    call = rec.Call(None, rec.at_ns(ns), ROWS, {"outputs": [3, 7]}, "infer", 5)
    assert line == dumps(rec.success_record(fields, call))
    assert json.loads(line)["when"] == "2026-11-18 11:06:40.123456+00:00"


def test_file_records_hold_the_calls_in_order(tmp_path: Path, make_server: Any) -> None:
    path = tmp_path / "logs.jsonl"
    server = make_server(str(path), {"m1:v2": SumModel, "bad": FailingModel})
    answers = [
        server.test("/v2/models/m1/versions/v2/infer", {"id": f"r{i}", "inputs": [[i, 1]]})
        for i in range(300)
    ]
    server.test("/v2/models/bad/infer", {"id": "e1", "inputs": [[1]]}, silent=True)
    server.wait_for_completion()
    records = lines_of(path)
    assert [r["request"]["id"] for r in records] == [f"r{i}" for i in range(300)] + ["e1"]
    for record, answer in zip(records, answers, strict=False):
        assert list(record)[:6] == ["class", "worker", "model", "version", "host", "function_uri"]
        assert (record["class"], record["model"], record["version"]) == ("SumModel", "m1", "v2")
        assert record["resp"] == answer and record["when"] == answer["timestamp"]
        assert set(record) == {*list(record)[:6], "request", "op", "resp", "when", "microsec"}
    assert records[-1]["error"] == "no luck" and "resp" not in records[-1]


def test_calls_from_many_threads_are_each_logged_once(tmp_path: Path, make_server: Any) -> None:
    path = tmp_path / "logs.jsonl"
    server = make_server(str(path))

    def call(thread: int) -> None:
        for i in range(200):
            server.test("/v2/models/m1/infer", {"id": f"{thread}-{i}", "inputs": [[i]]})

    threads = [threading.Thread(target=call, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    server.wait_for_completion()
    ids = [r["request"]["id"] for r in lines_of(path)]
    assert sorted(ids) == sorted(f"{t}-{i}" for t in range(8) for i in range(200))
    for t in range(8):  # one caller's records keep its order
        assert [i for i in ids if i.startswith(f"{t}-")] == [f"{t}-{i}" for i in range(200)]


def test_a_partial_batch_goes_to_the_file_on_time_and_at_stop(
    tmp_path: Path, make_server: Any
) -> None:
    path = tmp_path / "logs.jsonl"
    server = make_server(str(path), batch=3, stream_args={"flush_after": 0.3})
    for i in range(7):
        server.test("/v2/models/m1/infer", {"id": f"r{i}", "inputs": [[i]]})
    wait_for(lambda: path.exists() and len(path.read_bytes().splitlines()) == 3)  # on time
    assert [len(r["values"]) for r in lines_of(path)] == [3, 3, 1]
    server.test("/v2/models/m1/infer", {"id": "last", "inputs": [[9]]})
    slow = make_server(str(tmp_path / "slow.jsonl"), batch=5, stream_args={"flush_after": 60})
    slow.test("/v2/models/m1/infer", {"id": "s0", "inputs": [[1]]})
    slow.test("/v2/models/m1/infer", {"id": "s1", "inputs": [[2]]})
    server.wait_for_completion()
    slow.wait_for_completion()  # at stop, long before flush_after
    (record,) = lines_of(tmp_path / "slow.jsonl")
    assert record["headers"] == list(rec.BATCH_HEADERS)
    assert [row[0]["id"] for row in record["values"]] == ["s0", "s1"]
    assert [row[0]["id"] for r in lines_of(path) for row in r["values"]][-1] == "last"


def test_a_stream_that_is_down_never_fails_a_request(tmp_path: Path, make_server: Any) -> None:
    """The file's folder is a regular file: every push fails, every request answers; once
    the folder can be made, the records held meanwhile arrive, in order, none lost."""
    blocker = tmp_path / "logs"
    blocker.write_text("not a folder")
    server = make_server(str(blocker / "model-logs.jsonl"))
    for i in range(50):
        answer = server.test("/v2/models/m1/infer", {"id": f"r{i}", "inputs": [[i, 1]]})
        assert answer["outputs"] == [i + 1]
    pusher = next(server.iter_models()).model_logger.pusher
    wait_for(lambda: pusher.failed > 0)
    assert pusher.sent == 0 and pusher.dropped == 0
    blocker.unlink()
    wait_for(lambda: pusher.sent == 50, timeout=30)
    server.wait_for_completion()
    ids = [r["request"]["id"] for r in lines_of(blocker / "model-logs.jsonl")]
    assert ids == [f"r{i}" for i in range(50)]


def test_set_metric_reaches_one_record_only(tmp_path: Path) -> None:
    path = tmp_path / "logs.jsonl"
    fn = mlserve.new_function("fn", project="proj")
    fn.add_model("m1", class_name=SumModel, metric=True)
    fn.add_model("m2", class_name=SumModel)
    fn.set_tracking(str(path))
    server = fn.to_mock_server()
    try:
        server.test("/v2/models/m1/infer", ROWS)
        server.test("/v2/models/m2/infer", ROWS)
        server.test("/v2/models/m1/infer", {"inputs": [[1]]})
    finally:
        server.wait_for_completion()
    assert [r.get("metrics") for r in lines_of(path)] == [{"rows": 2}, None, {"rows": 1}]


class OddMetricModel(SumModel):
    """Sets a metric no JSON encoder can write, on its first call only."""

    def predict(self, request: dict[str, Any]) -> Any:
        if request.get("id") == "odd":
            self.set_metric("odd", object())
        return super().predict(request)


def test_a_record_that_cannot_be_encoded_fails_no_request(
    tmp_path: Path, make_server: Any, caplog: Any
) -> None:
    path = tmp_path / "logs.jsonl"
    server = make_server(str(path), {"m1": OddMetricModel})
    assert server.test("/v2/models/m1/infer", {"id": "odd", "inputs": [[1, 2]]})["outputs"] == [3]
    assert server.test("/v2/models/m1/infer", {"id": "ok", "inputs": [[3, 4]]})["outputs"] == [7]
    pusher = next(server.iter_models()).model_logger.pusher
    server.wait_for_completion()
    assert [r["request"]["id"] for r in lines_of(path)] == ["ok"]
    assert (pusher.sent, pusher.dropped) == (1, 1)
    assert any("cannot build a record" in r.getMessage() for r in caplog.records)


def test_errors_and_successes_reach_the_file_in_call_order(
    tmp_path: Path, make_server: Any
) -> None:
    """A failed call's line is built on the request thread too: one inbox of lines."""
    path = tmp_path / "logs.jsonl"
    server = make_server(str(path), {"m1": SumModel, "bad": FailingModel})
    for i in range(6):
        model = "bad" if i % 3 == 1 else "m1"
        server.test(f"/v2/models/{model}/infer", {"id": f"r{i}", "inputs": [[i]]}, silent=True)
    server.wait_for_completion()
    records = lines_of(path)
    assert [r["request"]["id"] for r in records] == [f"r{i}" for i in range(6)]
    assert [r.get("error") for r in records] == [None, "no luck", None, None, "no luck", None]
    assert [r["model"] for r in records] == ["m1", "bad", "m1", "m1", "bad", "m1"]


def test_past_the_bound_a_file_stream_keeps_the_newest_lines_in_order(
    tmp_path: Path, make_server: Any
) -> None:
    """The file cannot be written (its folder is a file): the lines wait, past ``max_queue``
    the oldest give way, counted; once it can be written the newest arrive, in order."""
    blocker = tmp_path / "logs"
    blocker.write_text("not a folder")
    server = make_server(str(blocker / "model-logs.jsonl"), stream_args={"max_queue": 5})
    pusher = next(server.iter_models()).model_logger.pusher
    for i in range(40):
        server.test("/v2/models/m1/infer", {"id": f"r{i}", "inputs": [[i]]})
        if i % 8 == 7:  # let the sender take what waits: pending lines pass the bound too
            pusher.flush(timeout=0.2)
    wait_for(lambda: pusher.dropped >= 35 and pusher.failed > 0)
    blocker.unlink()
    server.wait_for_completion()
    ids = [r["request"]["id"] for r in lines_of(blocker / "model-logs.jsonl")]
    assert ids == [f"r{i}" for i in range(40 - len(ids), 40)]
    assert 1 <= len(ids) <= 5
    assert (pusher.sent, pusher.sent + pusher.dropped) == (len(ids), 40)


class JsonTarget:
    """A push_json target that keeps the lines and keys it is given."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.keys: list[bytes] = []

    def push(self, records: list[dict[str, Any]]) -> None:
        raise AssertionError("a push_json target gets lines")

    def push_json(self, lines: list[bytes], keys: list[bytes]) -> None:
        self.lines += lines
        self.keys += keys

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class KeylessTarget(JsonTarget):
    uses_keys = False


def test_lines_carry_model_names_as_keys_to_targets_that_use_keys() -> None:
    start = datetime(2026, 11, 23, 12, 0, 0, 5, tzinfo=UTC)
    for target_class, keyed in ((JsonTarget, True), (KeylessTarget, False)):
        target = target_class()
        pusher = StreamPusher(target)
        a, b = Model("a"), Model("b", "v1")
        pusher.push(a, start, {"id": "1", "inputs": [[1]]}, {"outputs": [1]}, "infer", 5)
        pusher.push_error(b, start, {"id": "2", "inputs": [[2]]}, "infer", ValueError("no"))
        pusher.push(b, start, {"id": "3", "inputs": [[3]]}, {"outputs": [3]}, "infer", 6)
        pusher.close()
        records = [json.loads(line) for line in target.lines]
        assert [(r["model"], r["request"]["id"], r.get("error")) for r in records] == [
            ("a", "1", None),
            ("b", "2", "no"),
            ("b", "3", None),
        ]
        assert target.keys == ([b"a", b"b", b"b"] if keyed else [])
        assert (pusher.sent, pusher.dropped) == (3, 0)


@pytest.mark.parametrize("lines", [True, False], ids=["lines", "calls"])
def test_the_sender_wakes_when_callers_on_two_threads_pass_the_mark_together(
    lines: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller on another thread may append between a caller's append and its look at
    the inbox's length, so that neither sees the waking mark itself: the sender still
    wakes at once and sends (its idle pause is made too long to come first here). The
    inbox holds encoded lines for a file-like target, calls for a target of dicts."""
    monkeypatch.setattr(pusher_module, "IDLE_WAKE_SECONDS", 600.0)
    model, start = Model("a"), time.time_ns()
    if lines:
        target: Any = KeylessTarget()
        sent, mark = target.lines, pusher_module.WAKE_AT_LINES
        racing: Any = b'{"model":"a","from":"the other thread"}'
    else:
        target = MemoryStream(f"dummy://wake-{time.time_ns()}")
        sent, mark = target.records, pusher_module.WAKE_AT
        racing = rec.Call(
            model, start, {"inputs": [["other thread"]]}, {"outputs": [1]}, "infer", 5
        )
    pusher = StreamPusher(target)
    for _ in range(mark - 1):
        pusher.push(model, start, ROWS, {"outputs": [3, 7]}, "infer", 5)
    pusher._inbox.append(racing)  # the other thread's append: its length check is still to come
    pusher.push(model, start, ROWS, {"outputs": [3, 7]}, "infer", 5)
    wait_for(lambda: len(sent) >= mark)
    pusher.close()
    if lines:
        assert sent[mark - 1] == racing
    else:
        assert sent[mark - 1]["request"]["inputs"] == [["other thread"]]
    assert (len(sent), pusher.sent, pusher.dropped) == (mark + 1, mark + 1, 0)
