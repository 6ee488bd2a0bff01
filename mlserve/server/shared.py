"""One model state across the workers of ``mlserve serve --workers N``.

Each worker has its own models in its own memory (the kernel spreads
connections among them), so a repository load or unload must reach every
worker before the call returns. The supervisor relays it, over one Unix
socket pair per worker (newline-delimited JSON):

    worker -> supervisor   {"kind": "request", "id", "op": "load"|"unload", "name"}
    supervisor -> workers  {"kind": "command", "seq", "op", "name"}   (every worker)
    worker -> supervisor   {"kind": "ack", "seq", "error"}
    supervisor -> worker   {"kind": "reply", "id", "error"}           (once all acked)

The supervisor runs one command at a time and sends it to every worker, the
asking one included: all workers apply the same loads and unloads in the same
order, so their repository indexes and readiness agree. A worker that died
is dropped from the relay (its acknowledgement is not awaited).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import selectors
import socket
import threading
from collections import deque
from typing import Any

from mlserve.protocol import errors
from mlserve.server.serving import Serving

__all__ = ["CONTROL_FD_ENV", "SharedRepository", "StateRelay", "share_model_state"]

logger = logging.getLogger("mlserve.server")

# The file descriptor of a worker's end of its socket pair with the supervisor.
CONTROL_FD_ENV = "MLSERVE_CONTROL_FD"
REPLY_TIMEOUT_SECONDS = 300.0  # every worker loads the model: as long as a slow load


def _send(sock: socket.socket, lock: threading.Lock, message: dict[str, Any]) -> None:
    data = json.dumps(message).encode() + b"\n"
    with lock:
        sock.sendall(data)


def _lines(sock: socket.socket) -> Any:
    """The JSON messages read from ``sock`` until it closes."""
    with sock.makefile("rb") as stream:
        for line in stream:
            yield json.loads(line)


class StateRelay:
    """The supervisor's side: relays each load/unload to every worker, in one order."""

    def __init__(self, workers: int) -> None:
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(workers)]
        self.worker_ends = [theirs for _, theirs in pairs]
        self._socks = [mine for mine, _ in pairs]
        self._buffers = [b"" for _ in pairs]
        self._live = set(range(workers))
        self._queue: deque[tuple[int, dict[str, Any]]] = deque()
        self._current: tuple[int, dict[str, Any], set[int], dict[int, Any]] | None = None
        self._seq = itertools.count()

    def fd_of(self, index: int) -> int:
        """The descriptor worker ``index`` inherits (``pass_fds``)."""
        return self.worker_ends[index].fileno()

    def start(self) -> StateRelay:
        """Relay in a daemon thread (once the workers have inherited their ends)."""
        for end in self.worker_ends:
            end.close()
        threading.Thread(target=self._run, daemon=True, name="state-relay").start()
        return self

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for index, sock in enumerate(self._socks):
            selector.register(sock, selectors.EVENT_READ, index)
        while self._live:
            for key, _ in selector.select():
                index = key.data
                data = self._socks[index].recv(65536)
                if not data:
                    selector.unregister(self._socks[index])
                    self._drop(index)
                    continue
                self._buffers[index] += data
                *lines, self._buffers[index] = self._buffers[index].split(b"\n")
                for line in lines:
                    self._receive(index, json.loads(line))
            self._next()

    def _receive(self, index: int, message: dict[str, Any]) -> None:
        if message["kind"] == "request":
            self._queue.append((index, message))
        elif message["kind"] == "ack" and self._current is not None:
            _, _, waiting, failures = self._current
            waiting.discard(index)
            if message.get("error"):
                failures[index] = message["error"]

    def _drop(self, index: int) -> None:
        self._live.discard(index)
        if self._current is not None:
            self._current[2].discard(index)

    def _next(self) -> None:
        """Answer the command every live worker acknowledged; send the next one."""
        if self._current is not None and not self._current[2]:
            origin, request, _, failures = self._current
            error = failures.get(origin) or next(iter(failures.values()), None)
            self._current = None
            if origin in self._live:
                self._write(origin, {"kind": "reply", "id": request["id"], "error": error})
        while self._current is None and self._queue:
            origin, request = self._queue.popleft()
            seq = next(self._seq)
            command = {"kind": "command", "seq": seq, "op": request["op"], "name": request["name"]}
            self._current = (origin, request, set(self._live), {})
            for index in list(self._live):
                self._write(index, command)
            if not self._current[2]:  # every worker died meanwhile
                self._current = None

    def _write(self, index: int, message: dict[str, Any]) -> None:
        try:
            self._socks[index].sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self._drop(index)


class SharedRepository:
    """A worker's repository: loads and unloads go through the relay to every worker."""

    def __init__(self, inner: Any, sock: socket.socket) -> None:
        self.inner = inner
        self._sock = sock
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        threading.Thread(target=self._listen, daemon=True, name="state-listener").start()

    def __getattr__(self, name: str) -> Any:  # resolve_label and the like: the worker's own
        return getattr(self.inner, name)

    def index(self) -> list[dict[str, Any]]:
        return self.inner.index()

    async def load(self, name: str) -> None:
        await self._relay("load", name)

    async def unload(self, name: str) -> None:
        await self._relay("unload", name)

    async def _relay(self, op: str, name: str) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        request_id = next(self._ids)
        self._pending[request_id] = (loop, future)
        message = {"kind": "request", "id": request_id, "op": op, "name": name}
        _send(self._sock, self._lock, message)
        try:
            error = await asyncio.wait_for(future, REPLY_TIMEOUT_SECONDS)
        finally:
            self._pending.pop(request_id, None)
        if error:
            raise _as_exception(error)

    def _listen(self) -> None:
        for message in _lines(self._sock):
            if message["kind"] == "reply":
                loop, future = self._pending.get(message["id"], (None, None))
                if loop is not None and future is not None:
                    loop.call_soon_threadsafe(_settle, future, message["error"])
            elif message["kind"] == "command":
                error = self._apply(message["op"], message["name"])
                _send(
                    self._sock, self._lock, {"kind": "ack", "seq": message["seq"], "error": error}
                )

    def _apply(self, op: str, name: str) -> dict[str, Any] | None:
        """Run one relayed load/unload on this worker's own repository."""
        try:
            asyncio.run(self.inner.load(name) if op == "load" else self.inner.unload(name))
        except Exception as exc:
            if errors.status_of(exc) >= 500:
                logger.exception("%s of %s failed in worker %d", op, name, os.getpid())
            return {"type": type(exc).__name__, "message": str(exc), "pid": os.getpid()}
        return None


def _settle(future: asyncio.Future[Any], error: object) -> None:
    if not future.done():
        future.set_result(error)


def _as_exception(error: dict[str, Any]) -> Exception:
    """The error a worker raised, as the same class when it is one of mlserve's."""
    cls = getattr(errors, error["type"], None)
    if isinstance(cls, type) and issubclass(cls, errors.MLServeError):
        return cls(error["message"])
    return errors.ModelError(f"worker {error['pid']}: {error['type']}: {error['message']}")


def share_model_state(server: Serving) -> None:
    """In a worker of ``--workers N``: route the server's repository through the relay."""
    fd = os.environ.pop(CONTROL_FD_ENV, None)  # not for the processes this one starts
    if not fd or getattr(server, "repository", None) is None:
        return
    try:
        sock = socket.socket(fileno=int(fd))
    except (OSError, ValueError):
        logger.warning("no model-state relay on fd %s: this worker's loads stay its own", fd)
        return
    server.repository = SharedRepository(server.repository, sock)
