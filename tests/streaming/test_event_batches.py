"""How a stream's events reach a face (docs/streaming.md#how-chunks-are-sent): the first
chunk alone, the chunks ready together in one write, each one that made the stream wait
sent before it waited; a slow client stops the pull; the per-stream timer of the chunk
and stream timeouts. ``write_events`` is driven here with a recording ``write``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import pytest

from mlserve.core.limits import RequestTimeout
from mlserve.core.streams import ChunkStream
from mlserve.http.gate import write_events
from tests.fixtures import Multiplier, serve

WAIT = 10.0  # seconds a gate may take to open before the test fails (never a timing assert)
SERVER = serve({"m": Multiplier})  # what turns an error into its event


class Writes:
    """What ``write_events`` wrote, one list of events per call; ``slow`` makes every
    write wait until ``reads`` is set, as a client that stopped reading."""

    def __init__(self, slow: bool = False) -> None:
        self.calls: list[list[bytes]] = []
        self.slow = slow
        self.reads = asyncio.Event()

    def __call__(self, events: list[bytes]) -> Awaitable[None] | None:
        self.calls.append(list(events))
        return self.reads.wait() if self.slow else None


def _run(stream: ChunkStream, writes: Writes) -> list[bytes]:
    async def run() -> list[bytes]:
        return await write_events(SERVER, stream, "/v2/models/m/infer_stream", writes)

    return asyncio.run(run())


def _data(events: list[bytes]) -> list[bytes]:
    return [event.removeprefix(b"data: ").removesuffix(b"\n\n") for event in events]


def test_chunks_ready_together_go_out_in_one_write_after_the_first_alone() -> None:
    async def ready() -> AsyncIterator[int]:
        for n in range(5):
            yield n  # never suspends: every chunk is ready at once

    writes = Writes()
    last = _run(ChunkStream(ready()), writes)
    assert [_data(call) for call in writes.calls] == [[b"0"]]
    assert _data(last) == [b"1", b"2", b"3", b"4"]  # sent with the end of the answer


def test_a_chunk_goes_out_before_the_stream_waits_for_the_next() -> None:
    async def waits() -> AsyncIterator[int]:
        for n in range(3):
            await asyncio.sleep(0)  # no chunk is ready before this one
            yield n

    writes = Writes()
    last = _run(ChunkStream(waits()), writes)
    # the face may send its head before the first wait; each chunk before the next wait
    assert [_data(call) for call in writes.calls] == [[], [b"0"], [b"1"]]
    assert _data(last) == [b"2"]


def test_an_error_ends_the_last_events() -> None:
    async def fails() -> AsyncIterator[int]:
        yield 1
        yield 2
        raise ValueError("broken mid-stream")

    writes = Writes()
    last = _run(ChunkStream(fails()), writes)
    assert _data(writes.calls[0]) == [b"1"]
    assert last[0] == b"data: 2\n\n" and last[1].startswith(b"event: error\ndata: ")
    assert b"broken mid-stream" in last[1]


def test_a_sync_generators_queued_chunks_go_out_together() -> None:
    produced = threading.Event()

    def chunks() -> Iterator[int]:
        yield 0
        yield from range(1, 6)
        produced.set()

    async def run() -> list[bytes]:
        stream = ChunkStream(chunks())
        assert await stream.prefetch()
        await asyncio.get_running_loop().run_in_executor(None, produced.wait, WAIT)
        return await write_events(SERVER, stream, "/p", writes)

    writes = Writes()
    last = asyncio.run(run())
    assert [_data(call) for call in writes.calls] == [[b"0"]]
    assert _data(last) == [b"1", b"2", b"3", b"4", b"5"]


def test_a_client_that_does_not_read_stops_the_pull() -> None:
    pulled: list[int] = []

    async def counted() -> AsyncIterator[int]:
        for n in range(1000):
            pulled.append(n)
            yield n
            await asyncio.sleep(0)

    async def run() -> None:
        writes = Writes(slow=True)
        writing = asyncio.ensure_future(write_events(SERVER, ChunkStream(counted()), "/p", writes))
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(pulled) <= 2, pulled  # the first chunk's write waits: one more at most
        writes.reads.set()
        await asyncio.wait_for(writing, WAIT)
        assert len(pulled) == 1000

    asyncio.run(run())


def test_the_chunk_timeout_ends_a_stream_that_waits_and_frees_its_timer() -> None:
    closed = asyncio.Event()

    async def stalls() -> AsyncIterator[int]:
        try:
            yield 1
            await asyncio.sleep(60)
            yield 2
        finally:
            closed.set()

    async def run() -> None:
        stream = ChunkStream(stalls(), chunk_timeout=0.05)
        assert await stream.__anext__() == 1
        with pytest.raises(RequestTimeout, match="no chunk came in 0.05 s"):
            await stream.__anext__()
        assert closed.is_set()
        assert stream._timer is None  # noqa: SLF001 (nothing holds the stream past its end)

    asyncio.run(run())


def test_a_fast_stream_outlives_its_chunk_timeout_in_all() -> None:
    async def steady() -> AsyncIterator[int]:
        for n in range(6):
            await asyncio.sleep(0.02)
            yield n

    async def run() -> list[Any]:
        stream = ChunkStream(steady(), chunk_timeout=0.05)  # 0.12 s in all: the timer moves on
        return [chunk async for chunk in stream]

    assert asyncio.run(run()) == list(range(6))


def test_a_cancel_that_is_not_the_timers_stays_a_cancel() -> None:
    async def stalls() -> AsyncIterator[int]:
        yield 1
        await asyncio.sleep(60)
        yield 2

    async def run() -> None:
        stream = ChunkStream(stalls(), chunk_timeout=30)
        assert await stream.__anext__() == 1
        reading = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.01)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        assert isinstance(stream.error, asyncio.CancelledError)

    asyncio.run(run())
