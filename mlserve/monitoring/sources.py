"""Reading the model-log stream back, with positions that survive a restart
(docs/monitoring.md#reading-the-stream-back).

The monitor consumes what the pusher wrote through one small interface, a
``Source``: ``poll`` returns records with the position just past each one,
and ``commit`` stores positions durably, per consumer group, so a restarted
reader resumes where the last commit left it (at-least-once: what was read
after the last commit is read again).

    source = open_source("redis://127.0.0.1:6379/0?stream=model-logs", group="monitor")
    for message in source.poll(1000, timeout=1.0):
        ...
    source.commit({message.partition: message.position})
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from itertools import accumulate, islice, repeat
from math import inf
from operator import add
from typing import Any, NamedTuple, Protocol
from urllib.parse import parse_qs, urlsplit

from mlserve.core.kafka_config import confluent, consumer_config
from mlserve.monitoring.streams.file import path_of
from mlserve.monitoring.streams.kafka import DEFAULT_TOPIC
from mlserve.monitoring.streams.redis import stream_address

__all__ = [
    "check_source",
    "FileSource",
    "KafkaSource",
    "Message",
    "RedisSource",
    "Source",
    "open_source",
]

logger = logging.getLogger("mlserve.monitoring.sources")

DEFAULT_GROUP = "mlserve-monitor"
CHUNK_BYTES = 1 << 20  # one read of the file stream
FILE_WAIT_SECONDS = 0.05  # between looks at a file that has nothing new
MAX_KAFKA_BATCH = 1_000_000  # librdkafka's limit on one consume()

RevokeCallback = Callable[[list[int]], None]


class Message(NamedTuple):
    """One record as written, and where the record after it starts."""

    value: bytes  # one record's JSON
    partition: int  # Kafka partition; 0 for file and Redis
    position: (
        int | str
    )  # file: byte offset after the line; Redis: this entry's id; Kafka: offset + 1


class Source(Protocol):
    """A reader of the model-log stream in a consumer group."""

    name: str  # identifies the stream in logs and state
    on_revoke: RevokeCallback | None  # Kafka: partitions a rebalance takes away, before it does

    def poll(self, max_records: int, timeout: float) -> list[Message]: ...

    def commit(self, positions: dict[int, int | str]) -> None: ...

    def resume_at(self, value: bytes, position: int | str) -> int | str:
        """The position to commit so that a restart reads this record again."""
        ...

    def assigned(self) -> set[int]: ...

    def close(self) -> None: ...


def open_source(url: str, group: str = DEFAULT_GROUP, **options: Any) -> Source:
    """The source reading ``url`` (a path or ``file://``, ``redis://``, ``kafka://``)."""
    source: Source = _opener(url)(url, group, **options)
    return source


def check_source(url: str) -> None:
    """Raise ``open_source``'s ValueError for a stream that cannot be read back, without
    connecting to it."""
    _opener(url)


def _opener(url: str) -> Any:
    scheme = urlsplit(url).scheme if "://" in url else "file"
    if scheme in ("http", "https"):
        raise ValueError(
            f"{url!r}: an http(s) stream is POSTed to a receiver and cannot be read back; "
            "log to a file, redis:// or kafka:// stream to monitor it"
        )
    opener = _OPENERS.get(scheme)
    if opener is None:
        known = ", ".join(f"{s}://" for s in _OPENERS)
        raise ValueError(f"no stream source for '{scheme}://' (known: {known}, or a plain path)")
    return opener


class FileSource:
    """Tails a JSON-lines file another process appends to; only complete lines count.

    The committed offset lives next to the stream, in ``<file>.<group>.offset``.
    A file that shrank below the offset (truncated or made anew) is read from 0.
    """

    def __init__(self, url: str, group: str = DEFAULT_GROUP) -> None:
        self.path = path_of(url).absolute()
        self.name = f"file:{self.path}"
        self.offset_path = self.path.with_name(f"{self.path.name}.{group}.offset")
        self.on_revoke: RevokeCallback | None = None
        self._file: Any = None
        self._start = self._committed()  # the file offset of the line read next
        self._partial = b""  # a last line still waiting for its newline
        self._ready: list[Message] = []  # complete lines read but not yet returned

    def _committed(self) -> int:
        try:
            return int(json.loads(self.offset_path.read_bytes())["offset"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("%s is unreadable (%s): reading from the start", self.offset_path, exc)
            return 0

    def poll(self, max_records: int, timeout: float) -> list[Message]:
        deadline = time.monotonic() + timeout
        while not self._ready:
            if self._fill():
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            time.sleep(min(FILE_WAIT_SECONDS, left))
        taken = self._ready[:max_records]
        del self._ready[:max_records]
        return taken

    def _fill(self) -> bool:
        """Read one chunk; whether it held anything (the file may still have nothing new)."""
        if self._file is None and not self._open():
            return False
        chunk = self._file.read(CHUNK_BYTES)
        if not chunk:
            self._check_replaced()
            return False
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if lines:
            sizes = map(add, map(len, lines), repeat(1))  # each line and its newline
            ends = list(islice(accumulate(sizes, initial=self._start), 1, None))
            # tuple.__new__ builds each Message in C (the NamedTuple's own __new__ is Python)
            ready = list(map(tuple.__new__, repeat(Message), zip(lines, repeat(0), ends)))
            self._start = ends[-1]
            if b"" in lines:  # blank lines are no records
                ready = [message for message in ready if message.value]
            self._ready.extend(ready)
        return True

    def _open(self) -> bool:
        try:
            self._file = open(self.path, "rb", buffering=0)  # noqa: SIM115 - kept open while tailing
        except FileNotFoundError:
            return False
        size = os.fstat(self._file.fileno()).st_size
        if size < self._start:
            logger.warning(
                "%s is shorter (%d bytes) than its committed offset %d: reading it from the start",
                self.path,
                size,
                self._start,
            )
            self._start = 0
        self._file.seek(self._start)
        return True

    def _check_replaced(self) -> None:
        """At the end of the file: start over when it was truncated or made anew."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return  # removed: a new file may come at this path; until then nothing is new
        ours = os.fstat(self._file.fileno())
        read = self._start + len(self._partial)
        if now.st_ino == ours.st_ino and now.st_size >= read:
            return
        logger.warning("%s was truncated or replaced: reading it from the start", self.path)
        self._file.close()
        self._file, self._start, self._partial = None, 0, b""

    def resume_at(self, value: bytes, position: int | str) -> int | str:
        """The start of the record's line."""
        return int(position) - len(value) - 1

    def commit(self, positions: dict[int, int | str]) -> None:
        """Write the offset of partition 0 atomically (temp file, fsync, rename)."""
        if 0 not in positions:
            return
        temp = self.offset_path.with_name(f"{self.offset_path.name}.tmp")
        with open(temp, "wb") as out:
            out.write(json.dumps({"offset": int(positions[0])}).encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, self.offset_path)

    def assigned(self) -> set[int]:
        return {0}

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _redis() -> Any:
    try:
        import redis
    except ImportError as exc:
        raise ImportError("a Redis stream needs redis-py: pip install 'mlserve[redis]'") from exc
    return redis


class RedisSource:
    """XREADs a Redis Stream from the last id; the committed id is the key
    ``<stream>:<group>:position``. A Redis that is down makes ``poll`` return
    nothing (logged) until it is back."""

    def __init__(
        self,
        url: str,
        group: str = DEFAULT_GROUP,
        stream: str | None = None,
        **client_args: Any,
    ) -> None:
        redis = _redis()
        parts = urlsplit(url)
        self.stream, address = stream_address(url, stream)
        host = f"{parts.hostname or 'localhost'}{f':{parts.port}' if parts.port else ''}"
        self.name = f"redis://{host}{parts.path or '/0'}?stream={self.stream}"  # no password
        self.position_key = f"{self.stream}:{group}:position"
        self.on_revoke: RevokeCallback | None = None
        client_args.setdefault("socket_timeout", 30.0)
        client_args.setdefault("socket_connect_timeout", 5.0)
        client_args["decode_responses"] = False
        socket_timeout = client_args["socket_timeout"]  # a block must end before it
        self._longest_block = inf if socket_timeout is None else max(0.0, socket_timeout - 1.0)
        self._client = redis.Redis.from_url(address, **client_args)
        self._down = (redis.ConnectionError, redis.TimeoutError)
        self._last: str | None = None  # read from the committed key on the first poll

    def poll(self, max_records: int, timeout: float) -> list[Message]:
        deadline = time.monotonic() + timeout
        try:
            if self._last is None:
                committed = self._client.get(self.position_key)
                self._last = committed.decode() if committed else "0-0"
            block = min(timeout, self._longest_block)
            found = self._client.xread(
                {self.stream: self._last},
                count=max(1, max_records),
                block=int(block * 1000) if block > 0 else None,
            )
        except self._down as exc:
            logger.warning("Redis stream %s unreachable: %s", self.name, exc)
            time.sleep(max(0.0, deadline - time.monotonic()))
            return []
        messages = []
        for _stream, entries in found or ():
            for entry_id, fields in entries:
                position = entry_id.decode()
                value = fields.get(b"record")
                if value is None:
                    logger.warning(
                        "%s entry %s has no 'record' field: skipped", self.name, position
                    )
                else:
                    messages.append(Message(value, 0, position))
                self._last = position
        return messages

    def resume_at(self, value: bytes, position: int | str) -> int | str:
        """The id just below the entry's (reading resumes after the id committed)."""
        ms, _, seq = str(position).partition("-")
        if int(seq or 0) > 0:
            return f"{ms}-{int(seq) - 1}"
        return f"{int(ms) - 1}-18446744073709551615"

    def commit(self, positions: dict[int, int | str]) -> None:
        """SET the committed key; a Redis that is down is logged (the next start rereads)."""
        if 0 not in positions:
            return
        try:
            self._client.set(self.position_key, str(positions[0]))
        except self._down as exc:
            logger.warning("cannot commit %s at %s: %s", self.name, positions[0], exc)

    def assigned(self) -> set[int]:
        return {0}

    def close(self) -> None:
        self._client.close()


class KafkaSource:
    """A confluent-kafka consumer in consumer group ``group``; offsets are committed
    only by ``commit``. ``options`` and the URL's query parameters other than
    ``topic`` are librdkafka consumer properties (``options`` win)."""

    def __init__(
        self, url: str, group: str = DEFAULT_GROUP, topic: str | None = None, **options: Any
    ) -> None:
        kafka = confluent()
        parts = urlsplit(url)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        query_topic = query.pop("topic", "")
        self.topic = topic or query_topic or DEFAULT_TOPIC
        self.name = f"kafka:{self.topic}"
        self.on_revoke: RevokeCallback | None = None
        config = consumer_config(
            parts.netloc,
            group,
            **{"logger": logging.getLogger("mlserve.monitoring.kafka"), **query, **options},
        )
        config["enable.auto.commit"] = False
        config.setdefault("auto.offset.reset", "earliest")
        self._kafka = kafka
        self._assigned: set[int] = set()
        try:
            self._consumer = kafka.Consumer(config)
        except kafka.KafkaException as exc:  # a misspelt or bad property of the URL's query
            raise ValueError(f"Kafka source {self.name}: {exc.args[0].str()}") from None
        self._consumer.subscribe(
            [self.topic],
            on_assign=self._assign,
            on_revoke=self._revoke,
            on_lost=self._revoke,
        )
        self._closed = False

    def _assign(self, consumer: Any, partitions: list[Any]) -> None:
        self._assigned |= {p.partition for p in partitions if p.topic == self.topic}

    def _revoke(self, consumer: Any, partitions: list[Any]) -> None:
        """Tell the monitor first: it may still commit them from its callback."""
        taken = sorted(p.partition for p in partitions if p.topic == self.topic)
        if taken and self.on_revoke is not None:
            self.on_revoke(taken)
        self._assigned -= set(taken)

    def poll(self, max_records: int, timeout: float) -> list[Message]:
        found = self._consumer.consume(
            num_messages=min(max(1, max_records), MAX_KAFKA_BATCH), timeout=timeout
        )
        messages = []
        eof = self._kafka.KafkaError._PARTITION_EOF
        for record in found:
            error = record.error()
            if error is not None:
                if error.fatal():
                    raise self._kafka.KafkaException(error)
                if error.code() != eof:
                    logger.warning("Kafka source %s: %s", self.name, error)
                continue
            value = record.value()
            if value is not None and record.partition() in self._assigned:
                messages.append(Message(value, record.partition(), record.offset() + 1))
        return messages

    def resume_at(self, value: bytes, position: int | str) -> int | str:
        """The record's own offset (a committed offset is the next one read)."""
        return int(position) - 1

    def commit(self, positions: dict[int, int | str]) -> None:
        """Commit synchronously the partitions still held; a failure is logged (the
        partition's next owner reads again from its previous commit)."""
        offsets = [
            self._kafka.TopicPartition(self.topic, partition, int(position))
            for partition, position in positions.items()
            if partition in self._assigned
        ]
        if not offsets:
            return
        try:
            done = self._consumer.commit(offsets=offsets, asynchronous=False)
        except self._kafka.KafkaException as exc:
            logger.warning("Kafka source %s: commit failed: %s", self.name, exc)
            return
        for part in done or ():
            if part.error is not None:
                logger.warning(
                    "Kafka source %s: commit of partition %d failed: %s",
                    self.name,
                    part.partition,
                    part.error,
                )

    def assigned(self) -> set[int]:
        return set(self._assigned)

    def close(self) -> None:
        """Leave the group: the other members take the partitions."""
        if not self._closed:
            self._closed = True
            self._consumer.close()


_OPENERS: dict[str, Callable[..., Source]] = {
    "file": FileSource,
    "redis": RedisSource,
    "kafka": KafkaSource,
}
