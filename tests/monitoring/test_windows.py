"""Tumbling windows: every record counted in exactly one window, late ones within the
grace period in their own, and a monitor restarted from its committed position counting
no record twice (mlserve/monitoring/windows.py)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import orjson
import pytest

from mlserve.monitoring.windows import PartitionWindows, epoch_of, input_rows

W = 10.0


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="microseconds")


def line(model: str, at: float, inputs: object = None, error: bool = False) -> bytes:
    record: dict[str, object] = {"model": model, "endpoint_id": model, "when": stamp(at)}
    record["request"] = {"inputs": inputs if inputs is not None else [[at, 1.0]]}
    if error:
        record["error"] = "boom"
    else:
        record["microsec"] = 100
    return orjson.dumps(record)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def windows(clock: Clock, state: dict[str, object] | None = None) -> PartitionWindows:
    return PartitionWindows(
        0,
        W,
        2.0,
        lambda record: str(record["endpoint_id"]),
        lambda value, position: position - 1,
        state,
        clock,
    )


T0 = 1_800_000_000.0  # a multiple of W


def test_epoch_of_reads_the_pushers_stamps_and_others() -> None:
    assert epoch_of(stamp(T0 + 1.25)) == pytest.approx(T0 + 1.25, abs=1e-6)
    assert epoch_of("2027-01-15T08:00:00+00:00") == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    assert epoch_of("2027-01-15T08:00:00.5") == pytest.approx(
        datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp() + 0.5
    )


def test_input_rows_takes_rows_or_one_flat_row() -> None:
    assert input_rows([[1, 2], [3, 4]]) == [[1, 2], [3, 4]]
    assert input_rows([1, 2, 3]) == [[1, 2, 3]]
    assert input_rows([[[1], [2]]]) is None  # not tabular
    assert input_rows({"x": 1}) is None
    assert input_rows([]) is None


def test_windows_count_calls_errors_latency_and_rows() -> None:
    clock = Clock(T0)
    part = windows(clock)
    for i in range(5):
        part.add(line("a", T0 + i), i + 1)
    part.add(line("a", T0 + 5, error=True), 6)
    part.add(line("b", T0 + 6), 7)
    part.add(b"{not json", 8)
    part.add(line("a", T0 + W + 3), 9)  # the next window: newest - grace passes T0 + W
    part.add(line("a", T0 + W + 4), 10)
    closed = part.close(part.due())
    assert sorted((c.window.uid, c.window.requests) for c in closed) == [("a", 6), ("b", 1)]
    a = next(c for c in closed if c.window.uid == "a")
    summary = a.summary()
    assert summary["requests"] == 6 and summary["errors"] == 1
    assert summary["latency_p50_us"] == 100 and summary["predictions_per_second"] == 5 / W
    assert len(a.window.rows) == 5
    assert part.counts == {"counted": 9, "malformed": 1, "late": 0, "skipped": 0}
    assert part.commit_position() == 8  # the open window's first record starts there


def test_a_record_late_within_grace_joins_its_window_and_later_ones_the_next() -> None:
    clock = Clock(T0)
    part = windows(clock)
    part.add(line("a", T0 + 1), 1)
    part.add(line("a", T0 + W + 1), 2)  # newest - grace = T0 + W - 1: nothing due yet
    assert part.due() == 0.0 or part.due() <= T0
    part.add(line("a", T0 + 9), 3)  # late by 2 s, within grace: its own window
    part.add(line("a", T0 + W + 3), 4)
    closed = part.close(part.due())
    assert [(c.window.start, c.window.requests) for c in closed] == [(T0, 2)]
    part.add(line("a", T0 + 8), 5)  # its window is closed: the first open one counts it, late
    open_window = part.open[("a", T0 + W)]
    assert open_window.requests == 3 and open_window.late == 1


def test_a_quiet_partition_closes_its_windows_by_the_clock() -> None:
    clock = Clock(T0 + 1)
    part = windows(clock)
    part.add(line("a", T0 + 1), 1)
    assert part.close(part.due()) == []  # still inside the window
    clock.now = T0 + W + 5  # nothing read for 4 s, past the window and its grace
    closed = part.close(part.due())
    assert [c.window.requests for c in closed] == [1]


def test_a_restart_from_the_committed_position_counts_every_record_exactly_once() -> None:
    """Records of two endpoints out of order (two writers' clocks), windows closed as they
    go; a crash after some closes: the second run reads from the committed position with
    the written state; each record ends up in exactly one written window."""
    rng = random.Random(7)
    stream = []
    for i in range(400):
        at = T0 + i * 0.25 + rng.uniform(-1.5, 1.5)  # up to 1.5 s out of order
        if rng.random() < 0.05:
            at -= 6  # later than the grace: late records
        stream.append(line(rng.choice("ab"), at, inputs=[[i]]))

    def run(part: PartitionWindows, start: int, stop: int, clock: Clock) -> dict[int, str]:
        written: dict[int, str] = {}
        for position in range(start, stop):
            clock.now = T0 + position * 0.25
            part.add(stream[position], position + 1)
            if position % 7 == 0:
                for closed in part.close(part.due()):
                    for row in closed.window.rows:
                        written[row[0]] = f"{closed.window.uid}@{closed.window.start}"
        return written

    clock = Clock(T0)
    first = windows(clock)
    written = run(first, 0, 250, clock)  # then killed: its open windows are lost
    state = orjson.loads(orjson.dumps(first.state()))  # as the store keeps it
    resume = first.commit_position()
    assert resume < 250
    second = windows(clock, state)
    written_again = run(second, resume, 400, clock)
    clock.now += 100  # and the rest, by the clock
    for closed in second.close(second.due()):
        for row in closed.window.rows:
            written_again[row[0]] = closed.window.uid
    assert not set(written) & set(written_again)  # nothing counted twice
    assert sorted([*written, *written_again]) == list(range(400))  # nothing lost
    assert second.counts["skipped"] > 0
