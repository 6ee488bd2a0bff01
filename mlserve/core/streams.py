"""``ChunkStream``: an answer in pieces, the body of a streamed response (docs/streaming.md).

A streaming model's generator (or a flow step's) becomes a ChunkStream, set as the
event's body; every face iterates it on the event loop and writes each chunk as it
comes. A sync generator never runs on the loop: a producer thread pulls it into a
bounded queue and waits when the reader is slow, so a slow client cannot grow the
server's memory; an async generator is pulled directly, which is backpressure by
itself. ``aclose`` (a client gone, a deadline) closes the generator where it runs,
so its ``finally`` runs. The limits between two chunks and on the whole stream are
``stream_chunk_timeout`` and ``stream_timeout`` (docs/security.md#limits): one timer
per stream watches both, moved on lazily, since a timer set and cancelled for each
chunk would cost more than the chunk (docs/performance.md#streaming-where-the-time-goes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from functools import partial
from typing import Any

from mlserve.core.limits import RequestTimeout

logger = logging.getLogger("mlserve.streams")

__all__ = ["DEFAULT_QUEUE", "ChunkStream"]

# Chunks a sync generator may produce ahead of its reader before it waits.
DEFAULT_QUEUE = 16

_END = object()  # the source has no more chunks


class _Source:
    """Where a stream's chunks come from: ``pull`` the next one (``_END`` at the end),
    ``close`` it early."""

    async def pull(self) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class _AsyncSource(_Source):
    """An async iterator, pulled on the loop: it computes only when asked."""

    def __init__(self, iterator: AsyncIterator[Any]) -> None:
        self._iterator = iterator

    async def pull(self) -> Any:
        try:
            return await self._iterator.__anext__()
        except StopAsyncIteration:
            return _END

    async def close(self) -> None:
        closing = getattr(self._iterator, "aclose", None)
        if closing is not None:
            with contextlib.suppress(Exception):  # its own error on the way out is not ours
                await closing()


class _ThreadSource(_Source):
    """A sync iterator, produced on a thread of its own into a queue of ``size``: the
    thread asks for a chunk only while the queue has room, so it never runs more than
    ``size`` chunks ahead of the reader, and sleeps on a lock when it is full. The loop
    is woken only when the reader waits, the producer only when it sleeps."""

    def __init__(self, iterator: Iterator[Any], size: int) -> None:
        self._iterator = iterator
        self._size = max(1, size)
        self._chunks: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits
        self._room = threading.Lock()  # held while the producer sleeps on a full queue
        self._room.acquire()
        self._sleeping = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the reader's, from the first pull

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = self._loop = asyncio.get_running_loop()
        _producers.run(partial(self._produce, loop))
        return loop

    def _produce(self, loop: asyncio.AbstractEventLoop) -> None:
        iterator, chunks, lock, size = self._iterator, self._chunks, self._lock, self._size
        try:
            while True:
                with lock:
                    if self._closed:
                        break
                    full = self._sleeping = len(chunks) >= size
                if full:
                    self._room.acquire()  # until the reader takes a chunk (or closes)
                    continue
                try:
                    item = next(iterator)
                except StopIteration:
                    item = _END
                except BaseException as exc:  # handed to the reader, raised where it iterates
                    item = _Failure(exc)
                with lock:
                    chunks.append(item)
                    waiter, self._waiter = self._waiter, None
                if waiter is not None:
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        loop.call_soon_threadsafe(_wake, waiter)
                if item is _END or type(item) is _Failure:
                    break
        finally:
            closing = getattr(iterator, "close", None)
            if closing is not None:
                with contextlib.suppress(Exception):  # its ``finally`` runs here, in this thread
                    closing()

    def _let_in(self) -> None:
        """Wake the producer sleeping on a full queue (holding ``_lock``)."""
        if self._sleeping:
            self._sleeping = False
            self._room.release()

    async def pull(self) -> Any:
        loop = self._loop or self._start()
        while True:
            with self._lock:
                if self._chunks:
                    item = self._chunks.popleft()
                    self._let_in()
                    break
                if self._closed:  # closed while this pull waited
                    return _END
                waiter = self._waiter = loop.create_future()
            await waiter
        if type(item) is _Failure:
            raise item.error
        return item

    async def close(self) -> None:
        if self._loop is None:  # never started: closed here, nothing of it ran
            self._closed = True
            closing = getattr(self._iterator, "close", None)
            if closing is not None:
                closing()
            return
        with self._lock:
            self._closed = True
            self._chunks.clear()
            self._let_in()  # a producer asleep on a full queue wakes, sees closed, stops
            waiter, self._waiter = self._waiter, None
        if waiter is not None:  # a pull waiting meanwhile ends
            _wake(waiter)


class _Producer:
    """A thread that runs sync generators, one stream after another."""

    def __init__(self, pool: _Producers) -> None:
        self._pool = pool
        self._task: Callable[[], None] | None = None
        self._given = threading.Lock()  # released when a task is given
        self._given.acquire()

    def give(self, task: Callable[[], None]) -> None:
        self._task = task
        self._given.release()

    def work(self) -> None:
        pool = self._pool
        while True:
            self._given.acquire()
            task, self._task = self._task, None
            if task is not None:
                task()  # _produce: hands every error of the generator to its reader
            del task
            with pool.lock:
                if len(pool.idle) >= pool.keep:
                    return
                pool.idle.append(self)


class _Producers:
    """The threads of the streams' sync generators: an idle one takes the next stream,
    since starting a thread costs more than a short stream takes."""

    def __init__(self, keep: int) -> None:
        self.keep = keep  # idle threads kept; more end
        self.idle: list[_Producer] = []
        self.lock = threading.Lock()

    def run(self, task: Callable[[], None]) -> None:
        with self.lock:
            producer = self.idle.pop() if self.idle else None
        if producer is None:
            producer = _Producer(self)
            threading.Thread(target=producer.work, daemon=True, name="mlserve-stream").start()
        producer.give(task)


_producers = _Producers(keep=32)


class _Failure:
    """An exception the producer thread met, carried to the reader."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _close_later(stream: ChunkStream) -> None:
    _pending_closes.add(task := asyncio.get_running_loop().create_task(stream.aclose()))
    task.add_done_callback(_pending_closes.discard)


_pending_closes: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak refs)


def _expire(stream: weakref.ref[ChunkStream]) -> None:
    """A stream's timer (holding it weakly: a stream dropped unread is still collected)."""
    alive = stream()
    if alive is not None:
        alive._expire()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Mapped(_Source):
    """Another stream's chunks through ``fn``."""

    def __init__(self, stream: ChunkStream, fn: Callable[[Any], Any]) -> None:
        self._stream = stream
        self._fn = fn

    async def pull(self) -> Any:
        try:
            chunk = await self._stream.__anext__()
        except StopAsyncIteration:
            return _END
        return self._fn(chunk)

    async def close(self) -> None:
        await self._stream.aclose()


class ChunkStream:
    """An answer in pieces: an async iterator of chunk bodies, in order.

    ``source`` is a sync iterator (produced on a thread into a queue of ``queue``
    chunks) or an async iterator (pulled on the loop). Iteration raises the exception
    that ended the stream; past ``chunk_timeout`` seconds without a chunk, or
    ``timeout`` seconds in all (0: no limit), it raises ``RequestTimeout`` (504) and
    closes the source. ``on_end(stream, error)`` is called once on the loop when the
    stream ends: exhausted (None), failed, or closed early (``asyncio.CancelledError``).
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        source: Iterator[Any] | AsyncIterator[Any] | _Source,
        *,
        queue: int = DEFAULT_QUEUE,
        chunk_timeout: float = 0.0,
        timeout: float = 0.0,
        on_end: Callable[[ChunkStream, BaseException | None], None] | None = None,
        name: str = "",
    ) -> None:
        if isinstance(source, _Source):
            self._source = source
        elif hasattr(source, "__anext__"):
            self._source = _AsyncSource(source)  # type: ignore[arg-type]
        else:
            self._source = _ThreadSource(iter(source), queue)
        self.chunks = 0
        self.error: BaseException | None = None  # what ended it, once ended
        self._chunk_timeout = chunk_timeout
        self._deadline = time.monotonic() + timeout if timeout else math.inf
        self._timeout = timeout
        self._timed = bool(chunk_timeout or timeout)
        self._due = math.inf  # (monotonic) when the pull now waiting times out
        self._reader: asyncio.Task[Any] | None = None  # the task of that pull
        self._timer: asyncio.TimerHandle | None = None  # at or before ``_due``
        self._cancelling = -1  # the reader's cancel count before the timer cancelled it
        self.name = name  # what its log lines call it (a model, a step)
        self._ahead: list[Any] = []  # a chunk prefetched, not yet delivered
        self._done = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the reader's, from its first pull
        self._on_end = on_end

    def __aiter__(self) -> ChunkStream:
        return self

    async def __anext__(self) -> Any:
        if self._ahead:
            chunk = self._ahead.pop()
        else:
            chunk = await self._pull()
        if chunk is _END:
            raise StopAsyncIteration
        self.chunks += 1
        return chunk

    async def prefetch(self) -> bool:
        """Pull the first chunk now, so that a failure before it is raised here (the
        caller answers it as an ordinary error); False when the stream is empty."""
        if not self._ahead and not self._done:
            self._ahead.append(await self._pull())
        return bool(self._ahead) and self._ahead[0] is not _END

    async def _pull(self) -> Any:
        if self._done:
            return _END
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if not self._timed:
            try:
                chunk = await self._source.pull()
            except BaseException as exc:  # the source's error (or a cancel) ends the stream
                await self._finish(exc, close=True)
                raise
        else:
            now = time.monotonic()
            due = (
                min(now + self._chunk_timeout, self._deadline)
                if self._chunk_timeout
                else self._deadline
            )
            if due <= now:
                error = self._timeout_error()
                await self._finish(error, close=True)
                raise error
            self._due = due
            reader = self._reader = asyncio.current_task()
            if self._timer is None:
                self._timer = loop.call_at(loop.time() + (due - now), _expire, weakref.ref(self))
            try:
                chunk = await self._source.pull()
            except asyncio.CancelledError as exc:
                # the timer's cancel (and no other): a timeout; else the cancel goes on
                if (
                    reader is not None
                    and self._cancelling >= 0
                    and reader.uncancel() <= self._cancelling
                ):
                    error = self._timeout_error()
                    await self._finish(error, close=True)
                    raise error from None
                await self._finish(exc, close=True)
                raise
            except BaseException as exc:  # the source's error ends the stream
                await self._finish(exc, close=True)
                raise
            finally:
                self._reader = None
        if chunk is _END:
            await self._finish(None, close=False)
        return chunk

    def _expire(self) -> None:
        """The stream's timer: a pull waiting past its due time is cancelled (its
        ``_pull`` turns that into the timeout); one with time left sets the timer to
        its own due time; with no pull waiting, the next pull sets it again."""
        self._timer = None
        reader = self._reader
        if reader is None or self._done:
            return
        left = self._due - time.monotonic()
        if left > 0:
            loop = self._loop
            assert loop is not None  # (set by the pull that set the timer)
            self._timer = loop.call_at(loop.time() + left, _expire, weakref.ref(self))
            return
        self._cancelling = reader.cancelling()
        reader.cancel()

    def _timeout_error(self) -> RequestTimeout:
        if time.monotonic() >= self._deadline - 1e-3:
            return RequestTimeout(f"the stream took longer than {self._timeout:g} s")
        return RequestTimeout(f"no chunk came in {self._chunk_timeout:g} s")

    async def _finish(self, error: BaseException | None, close: bool) -> None:
        if self._done:
            return
        self._done = True
        self._ahead.clear()
        self.error = error
        timer, self._timer = self._timer, None
        if timer is not None:  # no timer outlives its stream
            timer.cancel()
        try:
            if close:
                await self._source.close()
        finally:  # a cancel while the generator closes: the end is told all the same
            on_end, self._on_end = self._on_end, None
            if on_end is not None:
                try:
                    on_end(self, error)
                except Exception:  # the stream has ended all the same
                    logger.exception("stream %s: its end could not be recorded", self.name)

    async def aclose(self) -> None:
        """Stop early: the source's generator is closed (its ``finally`` runs where it
        runs); idempotent, never raises."""
        if not self._done:
            await self._finish(asyncio.CancelledError("the stream was closed early"), close=True)

    def __del__(self) -> None:
        """A stream dropped unread (a caller that never iterated it) still ends: its
        generator closed, its model's slot freed, on the loop that read it."""
        loop = self._loop
        if not self._done and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_close_later, self)

    def map(self, fn: Callable[[Any], Any]) -> ChunkStream:
        """This stream's chunks through ``fn``; closing the new one closes this one."""
        return ChunkStream(_Mapped(self, fn), name="mapped")

    def iterate(self, run: Callable[[Coroutine[Any, Any, Any]], Any]) -> Iterator[Any]:
        """The chunks as a sync generator for a thread that is not the loop's: ``run``
        runs one coroutine on the loop and returns its result (the mock server's
        ``BackgroundLoop.run``). Leaving the generator early closes the stream."""
        try:
            while True:
                try:
                    chunk = run(self.__anext__())
                except StopAsyncIteration:
                    return
                yield chunk
        finally:
            if not self._done:
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    run(self.aclose())
                else:  # left on a loop's own thread (collected there): never block it
                    _close_later(self)
