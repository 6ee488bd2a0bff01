"""``StreamPusher``: model-log records to a stream target, never in a request's way
(docs/monitoring.md#delivery).

A request thread only counts (sampling) and appends the call to a bounded
inbox -- for a target that takes JSON lines (file, Kafka) without batching,
the call's record already encoded. One background sender turns calls into
records (plain JSON, batched per model when ``batch > 1``), and pushes them
to the target. When the target fails, the records stay pending and are
retried with a growing pause; past ``max_queue`` pending records the oldest
are dropped. Sent, failed (records in failed sends, each retry counted) and
dropped records are counted on the pusher and as Prometheus metrics, in
logged calls (a batched record counts its rows).

Nothing is lost silently: every logged call is sent, or counted as dropped
(with a rate-limited warning) -- when a bound is passed, or when the stream
is closed (shutdown, SIGTERM) with records the target did not take in time.

Any step with a ``name`` can log through the pusher, an ensemble included::

    # in the ensemble's do_event, after computing its response:
    if self.model_logger is not None:
        self.model_logger.push(self, start, request, response, op, microsec, metrics)

``setup()`` sets ``model_logger`` on every model and on every ensemble router.

Why it is built this way (measured with benchmarks/tracking.py; numbers in
docs/monitoring.md, "Performance"): the sender shares the GIL with the
serving thread, so every microsecond it spends and every object it keeps
alive is taken from requests.

- The request side is a lock-free ``deque.append`` (~0.4 µs): sampling
  counts with ``itertools.count`` (atomic ``next()``). The bound is checked
  before the append, and a full inbox gives up its oldest call by an explicit
  ``popleft`` that is counted (a ``maxlen`` deque would evict silently; racing
  request threads may pass the bound by one call each, never lose one); a
  lock is taken only to count a drop.
- The sender is woken every ``WAKE_AT`` calls (else every 50 ms) and turns
  calls into records in small chunks. Calls held longer (a 50 ms wake alone)
  kept request and response dicts alive across collections: the GC then ran
  ~1000 young and ~10 full collections per 50k requests, ~9 µs per request,
  more than the sender itself.
- Targets with ``push_json`` (file, Kafka) get each record encoded once by
  the pusher (orjson) right after it is built; bytes wait for a push of up to
  ``MAX_PUSH_JSON`` records at no GC cost: one ``write()``, or one Kafka
  flush round trip (a GIL hand-over), per push. Other targets get dicts.
- Unbatched records for those targets are encoded by ``push()`` itself
  (``records.success_line``, ~3 µs): the call's objects are still warm in the
  request thread's cache, and the inbox then holds bytes, so the sender wakes
  only every ``WAKE_AT_LINES`` calls (one full push) and just writes. Built by a
  sender woken every 16 calls on a cold cache, the same record cost it 9-12 µs of
  CPU a call in a loaded server (4.5 in a tight loop): benchmarks/tracking.py,
  in-process. ``push_error`` encodes a failed call's line alike, so the inbox
  holds (line, key) pairs only, which the sender moves in C loops
  (``deque.extend`` over ``starmap``/``map``): no Python step per call.
- Each record also goes to its model's ring of the last ``RECENT_RECORDS``
  (``recent_records``, the web console's, docs/console.md#data-endpoints): one more
  ``deque.append`` of the line already built, 20-50 ns a logged call (timeit, a full
  ring), no copy and nothing for the GC to follow.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from datetime import datetime
from itertools import repeat, starmap
from operator import itemgetter
from typing import Any, cast

from mlserve.core import tracing
from mlserve.monitoring import records as rec
from mlserve.monitoring.streams import JsonStreamTarget, StreamTarget
from mlserve.protocol.tensors import dumps_strict

__all__ = ["StreamPusher"]

logger = logging.getLogger("mlserve.monitoring")

IDLE_WAKE_SECONDS = 0.05
MAX_RETRY_PAUSE = 2.0
DROP_LOG_SECONDS = 10.0  # at most one "dropped" warning per this many seconds
MAX_PUSH = 100  # records per push of dicts; also calls turned into records at a time
MAX_PUSH_JSON = 500  # records per push of encoded records (bytes wait at no GC cost)
WAKE_AT = 16  # calls in the inbox that wake the sender before its idle pause is over
# The same for calls encoded by push(): bytes cost the GC nothing to hold, so the sender
# wakes once per full push (each wake is a GIL hand-over, which the serving thread pays for).
WAKE_AT_LINES = MAX_PUSH_JSON
# Each model's last records, kept for the web console (docs/console.md#data-endpoints).
RECENT_RECORDS = 500


class _Fields(rec.ModelFields):
    """A model's record fields, and the ring of its last records (encoded lines, or
    dicts for a target that takes dicts): one ``deque.append`` per record, which a
    full ring pays by dropping its oldest."""

    def __init__(self, model: object, worker: object, function_uri: str, recent: Any) -> None:
        super().__init__(model, worker, function_uri)
        self.recent: collections.deque[Any] = recent


class _Batch:
    """The rows gathered for one model, and when its first row came."""

    def __init__(self, fields: _Fields) -> None:
        self.fields = fields
        self.rows: list[list[Any]] = []
        self.since = time.monotonic()

    def __len__(self) -> int:
        return len(self.rows)

    def record(self) -> dict[str, Any]:
        record = self.fields.base()
        record["headers"] = list(rec.BATCH_HEADERS)
        record["values"] = self.rows
        return record


class StreamPusher:
    """Logs model calls to ``target`` from a background thread.

    ``sample``: log every ``sample``-th successful call of a model (errors
    always). ``batch``: rows per batched record (1: one record per call).
    ``flush_after``: seconds after which a partial batch is sent. ``max_queue``:
    calls waiting in the inbox, and records waiting to be sent, at most.
    """

    def __init__(
        self,
        target: StreamTarget,
        batch: int = 1,
        sample: int = 1,
        function_uri: str = "",
        worker: object = 0,
        verbose: bool = False,
        flush_after: float = 2.0,
        max_queue: int = 10_000,
        name: str = "",
    ) -> None:
        self.target = target
        self.batch = max(int(batch or 1), 1)
        self.sample = max(int(sample or 1), 1)
        self.function_uri = function_uri
        self.worker = worker
        self.verbose = verbose
        self.flush_after = flush_after
        self.max_queue = max_queue
        self.sent = self.failed = self.dropped = 0
        self._inbox: collections.deque[Any] = collections.deque()  # calls, or lines
        # Targets with push_json get records as JSON bytes (and keys: model names), encoded
        # as soon as they are built; the others get dicts.
        self._encoded = callable(getattr(target, "push_json", None))
        self._lines = self._encoded and self.batch == 1  # a call is one JSON line
        # A call's line goes with its key only to targets that use keys (Kafka, not files).
        self._keyed = bool(getattr(target, "uses_keys", True))
        self._wake_at = WAKE_AT_LINES if self._lines else WAKE_AT
        if self._lines and self.sample == 1:  # the common case: no sampling step per call
            self.push = self._push_line  # type: ignore[method-assign]
        self._pending: collections.deque[Any] = collections.deque()
        self._keys: collections.deque[bytes] = collections.deque()
        self._sizes: collections.deque[int] = collections.deque()  # calls per pending record
        self._batches: dict[int, _Batch] = {}
        self._fields: dict[int, _Fields] = {}
        # model name -> its last records (``recent_records``), every version's together
        self.recent: dict[str, collections.deque[Any]] = {}
        self._counts: dict[int, Iterator[int]] = {}
        self._lock = threading.Lock()
        self._restart_lock = threading.Lock()
        self._wake = threading.Event()
        self._flush_now = False
        self._closing = False
        self._busy = False
        self._retry_at = 0.0
        self._retry_pause = 0.0
        self._drops_unlogged = 0
        self._drop_logged_at = 0.0
        self._metrics = _stream_metrics(name or type(target).__name__)
        self._thread = self._start()

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, daemon=True, name="mlserve-stream-pusher")
        thread.start()
        return thread

    # ---- request side (cheap, never raises) ------------------------------------

    def push(
        self,
        model: object,
        start: datetime | int,
        request: object,
        response: object,
        op: str,
        microsec: int,
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """Log one successful call (every ``sample``-th of this model); ``start``: a
        ``time.time_ns()`` reading (what models hand it) or a datetime."""
        if self.sample > 1 and next(self._counter(model)) % self.sample:
            return
        if self._lines:
            self._push_line(model, start, request, response, op, microsec, metrics)
            return
        trace_id = tracing.trace_id() if tracing.on else None
        self._enqueue(
            rec.Call(model, start, request, response, op, microsec, metrics, None, None, trace_id)
        )

    def _push_line(
        self,
        model: object,
        start: datetime | int,
        request: object,
        response: object,
        op: str,
        microsec: int,
        metrics: dict[str, Any] | None = None,
    ) -> None:
        """``push`` when a call is one JSON line: encoded here, while the call's objects are
        still warm in the cache; the inbox then holds lines only ((line, key) pairs for a
        target that uses keys), which the sender moves without a Python step per call. The
        call's parts stay arguments: a ``Call`` built and unpacked here cost a logged call
        about 0.3 µs more (measured on this path)."""
        try:
            fields = self._fields.get(id(model)) or self._new_fields(model)
            line = rec.success_line(fields, start, request, response, op, microsec, metrics)
        except Exception:  # never fails a request
            logger.exception("model-log stream: cannot build a record; skipped")
            self._count_dropped(1)
            return
        fields.recent.append(line)
        item = (line, fields.key) if self._keyed else line
        inbox = self._inbox
        if self._closing or len(inbox) >= self.max_queue:  # rare: _enqueue's general code
            self._enqueue(item)
            return
        inbox.append(item)  # _enqueue inline: this runs on every call
        if len(inbox) >= self._wake_at and not self._wake.is_set():  # see _enqueue
            self._wake.set()

    def push_error(
        self, model: object, start: datetime | int, request: object, op: str, exc: BaseException
    ) -> None:
        """Log a failed call at once: not sampled, not batched. The error text is
        ``str(exc)``, as mlrun writes it (the traceback follows when verbose)."""
        error = str(exc)
        if self.verbose:
            error += "\n" + "".join(traceback.format_exception(exc))
        trace_id = tracing.trace_id() if tracing.on else None
        self._push_alone(
            rec.Call(model, start, request, None, op, None, None, error, None, trace_id)
        )

    def push_stream(
        self,
        model: object,
        start: datetime | int,
        request: object,
        response: object,
        op: str,
        microsec: int,
        stream: dict[str, Any],
    ) -> None:
        """Log one streamed call as it ends (ok, failed or cancelled), at once: not sampled,
        not batched. ``response``: the chunks gathered; ``stream``: its ``chunks`` and
        ``first_chunk_microsec`` (and ``error`` or ``cancelled``)."""
        trace_id = tracing.trace_id() if tracing.on else None
        call = rec.Call(model, start, request, response, op, microsec, None, None, stream, trace_id)
        self._push_alone(call)

    def _push_alone(self, call: rec.Call) -> None:
        """A record pushed on its own (an error's, a stream's) and the sender woken."""
        if self._lines:  # the inbox holds lines only (see _push_line)
            try:
                fields = self._fields.get(id(call.model)) or self._new_fields(call.model)
                line = dumps_strict(rec.one_record(fields, call))
                fields.recent.append(line)
                self._enqueue((line, fields.key) if self._keyed else line)
            except Exception:  # never fails a request
                logger.exception("model-log stream: cannot build a record; skipped")
                self._count_dropped(1)
        else:
            self._enqueue(call)
        self._wake.set()

    def _counter(self, model: object) -> Iterator[int]:
        """The call counter of ``model`` (``next()`` on it is atomic: no lock)."""
        counter = self._counts.get(id(model))
        if counter is None:
            counter = self._counts.setdefault(id(model), itertools.count(1))
        return counter

    def _enqueue(self, item: object) -> None:
        """An append to a deque (atomic): no lock, no allocation besides ``item``."""
        if self._closing:  # a server used again after wait_for_completion()
            self._restart()
        inbox = self._inbox
        if len(inbox) >= self.max_queue:
            try:
                inbox.popleft()  # the oldest call gives way (the sender may have taken it)
            except IndexError:
                pass
            else:
                self._count_dropped(1)
        inbox.append(item)
        # At or past the mark, not at it: a caller on another thread may append between
        # this append and this look at the length, and then neither sees the mark itself.
        if len(inbox) >= self._wake_at and not self._wake.is_set():
            self._wake.set()

    def _restart(self) -> None:
        with self._restart_lock:  # not self._lock: the ending sender takes it to count
            if self._closing:
                self._thread.join()  # it counts what it left before it ends
                self._closing = False
                self._thread = self._start()

    # ---- control -------------------------------------------------------------------

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything logged so far, partial batches included; True when all went."""
        self._flush_now = True
        self._wake.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not (self._inbox or self._pending or self._batches or self._busy):
                return True
            time.sleep(0.005)
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Flush (waiting up to ``timeout`` for a target that is down), then stop.

        A later push starts the sender again (targets reconnect on demand).
        """
        if self._closing:
            return
        self.flush(timeout)
        self._closing = True
        self._wake.set()
        self._thread.join(timeout)  # the sender counts what is left as dropped, then ends
        if self._thread.is_alive():
            logger.warning("model-log stream: the sender is still busy with the target")
        try:
            self.target.close()
        except Exception:
            logger.exception("model-log stream: closing the target failed")

    # ---- sender thread ---------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing:
            idle = not self._wake.wait(IDLE_WAKE_SECONDS)
            self._wake.clear()
            self._busy = True
            try:
                self._step(idle)
            except Exception:  # the sender must outlive any bad record
                logger.exception("model-log stream: sender step failed")
            finally:
                self._busy = False
        self._drop_leftovers()

    def _drop_leftovers(self) -> None:
        """At close: what the target did not take is counted as dropped, never just lost."""
        lost = sum(self._sizes) + sum(len(b) for b in self._batches.values())
        self._pending.clear()
        self._keys.clear()
        self._sizes.clear()
        self._batches.clear()
        while True:  # calls that came in meanwhile
            try:
                self._inbox.popleft()
            except IndexError:
                break
            lost += 1
        if lost:
            logger.warning("model-log stream: %d logged calls not delivered at shutdown", lost)
            self._count_dropped(lost, log=False)

    def _step(self, idle: bool) -> None:
        """Calls become records in small chunks, so they die young (held longer, they cost
        the GC more than the sender: docs/monitoring.md, "Performance"). Encoded records
        wait for a full push (or the idle pause, or a flush); dicts are sent at once."""
        force, self._flush_now = self._flush_now, False
        while True:
            self._drain(MAX_PUSH)
            self._close_batches(force)
            full = not self._encoded or len(self._pending) >= MAX_PUSH_JSON
            while self._pending and (full or idle or force):
                if not (force or time.monotonic() >= self._retry_at) or not self._send():
                    return
                full = not self._encoded or len(self._pending) >= MAX_PUSH_JSON
            if len(self._inbox) < (1 if force else self._wake_at):
                return  # a few calls wait for the next wake

    def _drain(self, limit: int) -> None:
        inbox = self._inbox
        if self._lines:  # bytes, moved all at once: a wake ends with a full push
            self._drain_lines(len(inbox))
            return
        for _ in range(min(limit, len(inbox))):
            call = inbox.popleft()
            try:
                self._accept(call)
            except Exception:
                logger.exception("model-log stream: cannot build a record; skipped")
                self._count_dropped(1)

    def _drain_lines(self, count: int) -> None:
        """``_accept`` for the common case (encoded, unbatched): the inbox's lines (or
        (line, key) pairs) move to the pending records in C loops, not a Python step per
        call; past ``max_queue`` the oldest lines give way, counted."""
        pending = self._pending
        taken = pairs = collections.deque() if self._keyed else pending
        before = len(taken)
        try:  # what was taken before an IndexError stays in ``taken``
            taken.extend(starmap(self._inbox.popleft, repeat((), count)))
        except IndexError:  # a request thread gave the oldest up meanwhile (a full inbox)
            pass
        if self._keyed:
            pending.extend(map(_LINE, pairs))
            self._keys.extend(map(_KEY, pairs))
        self._sizes.extend(repeat(1, len(taken) - before))
        excess = len(self._pending) - self.max_queue
        if excess > 0:
            self._count_dropped(self._pop_front(excess))

    def _accept(self, call: rec.Call) -> None:
        """Turn a call into a record."""
        model = call.model
        fields = self._fields.get(id(model)) or self._new_fields(model)
        if call.error is not None or call.stream is not None:
            self._add_pending(rec.one_record(fields, call), fields, 1)
        elif self.batch == 1 and self._encoded:
            microsec = call.microsec
            assert microsec is not None  # a successful call's
            line = rec.success_line(
                fields, call.start, call.request, call.response, call.op, microsec, call.metrics
            )
            self._add_encoded(line, fields, 1)
        elif self.batch == 1:
            self._add_pending(rec.success_record(fields, call), fields, 1)
        else:
            batch = self._batches.get(id(model))
            if batch is None:
                batch = self._batches[id(model)] = _Batch(fields)
            batch.rows.append(rec.batch_row(call))
            if len(batch.rows) >= self.batch:
                self._add_pending(batch.record(), fields, len(batch))
                del self._batches[id(model)]

    def _new_fields(self, model: object) -> _Fields:
        name = str(getattr(model, "name", "") or "")
        recent = self.recent.setdefault(name, collections.deque(maxlen=RECENT_RECORDS))
        fields = _Fields(model, self.worker, self.function_uri, recent)
        self._fields[id(model)] = fields
        return fields

    def recent_records(self, model: str) -> list[Any]:
        """The last records of model ``model`` (every version), oldest first: JSON
        lines (bytes), or dicts for a target that takes dicts."""
        recent = self.recent.get(model)
        return list(recent.copy()) if recent is not None else []  # one C call: no race

    def _close_batches(self, force: bool) -> None:
        now = time.monotonic()
        for key, batch in list(self._batches.items()):
            if force or now - batch.since >= self.flush_after:
                batch = self._batches.pop(key)
                self._add_pending(batch.record(), batch.fields, len(batch))

    def _add_pending(self, record: dict[str, Any], fields: _Fields, calls: int) -> None:
        if self._encoded:
            self._add_encoded(dumps_strict(record), fields, calls)
            return
        fields.recent.append(record)
        self._pending.append(record)
        self._sizes.append(calls)
        if len(self._pending) > self.max_queue:
            self._count_dropped(self._pop_pending())

    def _add_encoded(self, line: bytes, fields: _Fields, calls: int) -> None:
        fields.recent.append(line)
        self._pending.append(line)  # bytes: nothing for the GC to follow
        self._keys.append(fields.key)
        self._sizes.append(calls)
        if len(self._pending) > self.max_queue:
            self._count_dropped(self._pop_pending())

    def _pop_pending(self) -> int:
        """Take the oldest pending record off; the number of calls it holds."""
        self._pending.popleft()
        if self._encoded:
            self._keys.popleft()
        return self._sizes.popleft()

    def _pop_front(self, count: int) -> int:
        """Take the ``count`` oldest pending records off; the number of calls they hold."""
        calls = sum(itertools.islice(self._sizes, count))
        queues: list[collections.deque[Any]] = [self._pending, self._sizes]
        if self._encoded:
            queues.append(self._keys)
        for queue in queues:
            if count >= len(queue):  # a push of all that was pending: the common case
                queue.clear()
            else:
                _consume(starmap(queue.popleft, repeat((), count)))
        return calls

    def _send(self) -> bool:
        size = MAX_PUSH_JSON if self._encoded else MAX_PUSH
        records = list(itertools.islice(self._pending, size))
        count = len(records)  # the target may change the list: never trust it afterwards
        try:
            if self._encoded:
                keys = list(itertools.islice(self._keys, size))
                cast(JsonStreamTarget, self.target).push_json(records, keys)  # (_encoded)
            else:
                self.target.push(records)
        except Exception as exc:
            self._count_failed(sum(itertools.islice(self._sizes, count)))
            self._retry_pause = min(max(self._retry_pause * 2, 0.05), MAX_RETRY_PAUSE)
            self._retry_at = time.monotonic() + self._retry_pause
            logger.warning(
                "model-log stream: push of %d records failed (%s); retrying in %.2f s",
                count,
                exc,
                self._retry_pause,
            )
            return False
        calls = self._pop_front(count)
        self._retry_pause = 0.0
        self.sent += calls
        self._metrics[0].inc(calls)
        return True

    def _count_failed(self, count: int) -> None:
        self.failed += count
        self._metrics[1].inc(count)

    def _count_dropped(self, count: int, log: bool = True) -> None:
        """Count ``count`` dropped calls (metric), with a warning at most every
        ``DROP_LOG_SECONDS``."""
        if not count:
            return
        with self._lock:  # request threads and the sender both drop
            self.dropped += count
            self._drops_unlogged += count
            now = time.monotonic()
            due = log and now - self._drop_logged_at >= DROP_LOG_SECONDS
            if due:
                unlogged, self._drops_unlogged, self._drop_logged_at = self._drops_unlogged, 0, now
        self._metrics[2].inc(count)
        if due:
            logger.warning(
                "model-log stream: %d logged calls dropped (buffer of %d full; %d in all)",
                unlogged,
                self.max_queue,
                self.dropped,
            )


_LINE, _KEY = itemgetter(0), itemgetter(1)  # of the inbox's (line, key) pairs


def _consume(items: Iterable[Any]) -> None:
    """Run through ``items`` in C (no Python step per item)."""
    collections.deque(items, maxlen=0)


def _stream_metrics(name: str) -> tuple[Any, Any, Any]:
    from mlserve.monitoring import metrics

    return (
        metrics.STREAM_SENT.labels(name),
        metrics.STREAM_FAILED.labels(name),
        metrics.STREAM_DROPPED.labels(name),
    )
