"""What the workers of ``mlserve serve --workers N`` share through their supervisor:
one model state, and one view of how many of them serve
(docs/deployment.md#when-a-worker-dies).

Each worker has its own models in its own memory (the kernel spreads
connections among them), so a repository load or unload must reach every
worker before the call returns. The supervisor relays it, over one Unix
socket pair per worker (newline-delimited JSON):

    worker -> supervisor   {"kind": "hello", "pid"}                   (its models built)
    supervisor -> worker   {"kind": "replay", "ops": [[op, name, overrides]...]} (the state)
    worker -> supervisor   {"kind": "serving"}                        (it listens)
    worker -> supervisor   {"kind": "request", "id", "op": "load"|"unload"|"weights", "name",
                            "overrides"}                               (weights: the weights)
    supervisor -> workers  {"kind": "command", "seq", "op", "name", "overrides"} (every worker)
    worker -> supervisor   {"kind": "ack", "seq", "error"}
    supervisor -> worker   {"kind": "reply", "id", "error"}           (once all acked)
    supervisor -> workers  {"kind": "workers", "serving", "workers", "restarts", "unready"}

The supervisor runs one command at a time and sends it to every worker that said
hello, the asking one included: all workers apply the same loads and unloads in
the same order, so their repository indexes and readiness agree. It keeps, per
model, the last load or unload some worker applied; a worker that starts later
(one restarted after a death) replays them before it serves. A worker that died
is dropped from the relay (its acknowledgement is not awaited). Every worker
hears how many workers serve and how many were restarted: its readiness answers
503 while fewer serve than ``--ready-min-workers``, and its ``/metrics`` shows
the supervisor's restart count.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import selectors
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only, suspends_for
from mlserve.protocol import errors
from mlserve.server.auth import READINESS_PATHS
from mlserve.server.serving import ModelRepository, ServerHandler, Serving
from mlserve.server.traffic import apply_weights

__all__ = [
    "CONTROL_FD_ENV",
    "SharedRepository",
    "StateRelay",
    "SupervisorLink",
    "share_model_state",
]

logger = logging.getLogger("mlserve.server")

# The file descriptor of a worker's end of its socket pair with the supervisor.
CONTROL_FD_ENV = "MLSERVE_CONTROL_FD"
REPLY_TIMEOUT_SECONDS = 300.0  # every worker loads the model: as long as a slow load


def _encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


@dataclass
class _Peer:
    """The supervisor's view of one worker process."""

    sock: socket.socket
    buffer: bytes = b""
    pid: int = 0
    joined: bool = False  # said hello: gets every command from then on
    serving: bool = False


@dataclass
class _Command:
    """The load or unload being applied by every worker."""

    origin: int
    request_id: int
    seq: int
    op: str
    name: str
    overrides: dict[str, Any] | None
    """A load's config override (docs/repository.md#loading-with-a-config-override)."""
    waiting: set[int]
    failures: dict[int, Any] = field(default_factory=dict)
    applied: int = 0


class StateRelay:
    """The supervisor's side: relays each load/unload to every worker, in one order,
    replays them to a worker that starts later, and tells every worker how many serve."""

    def __init__(self, workers: int, ready_min_workers: int = 1) -> None:
        self.workers = workers
        self.ready_min_workers = ready_min_workers
        self.served_pids: set[int] = set()  # workers that said they serve (the supervisor asks)
        self._peers: dict[int, _Peer] = {}
        self._ids = itertools.count()
        self._seqs = itertools.count()
        self._queue: deque[tuple[int, dict[str, Any]]] = deque()
        self._current: _Command | None = None
        # model name (or "weights <name>") -> the last op applied, its name and overrides
        # (a weights op: every weight set so far), oldest first
        self._state: dict[str, tuple[str, str, dict[str, Any] | None]] = {}
        self._restarts = 0
        self._inbox: deque[tuple[str, Any]] = deque()  # from the supervisor's thread
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)

    def add_worker(self) -> socket.socket:
        """A socket pair for a worker about to start: its end is returned (hand it down
        with ``pass_fds``, then close it here); the relay's thread serves the other."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._post("add", mine)
        return theirs

    def set_restarts(self, count: int) -> None:
        """The supervisor's restart count, told to every worker (their ``/metrics``)."""
        self._post("restarts", count)

    def start(self) -> StateRelay:
        """Relay in a daemon thread."""
        threading.Thread(target=self._run, daemon=True, name="state-relay").start()
        return self

    def _post(self, what: str, value: Any) -> None:
        self._inbox.append((what, value))
        self._wake_writer.send(b"\0")

    def _run(self) -> None:
        while True:
            for key, _ in self._selector.select():
                if key.data is None:
                    self._wake_reader.recv(4096)
                    while self._inbox:
                        self._take(*self._inbox.popleft())
                elif key.data in self._peers:
                    self._read(key.data)
            self._next()

    def _take(self, what: str, value: Any) -> None:
        """One thing the supervisor posted: a new worker's socket, or the restart count."""
        if what == "add":
            peer_id = next(self._ids)
            self._peers[peer_id] = _Peer(value)
            self._selector.register(value, selectors.EVENT_READ, peer_id)
        else:
            self._restarts = value
            self._broadcast_status()

    def _read(self, peer_id: int) -> None:
        peer = self._peers[peer_id]
        try:
            data = peer.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._drop(peer_id)
            return
        peer.buffer += data
        *lines, peer.buffer = peer.buffer.split(b"\n")
        for line in lines:
            if peer_id in self._peers:
                self._receive(peer_id, json.loads(line))

    def _receive(self, peer_id: int, message: dict[str, Any]) -> None:
        peer, kind, current = self._peers[peer_id], message["kind"], self._current
        if kind == "hello":
            peer.joined, peer.pid = True, message["pid"]
            ops = [list(entry) for entry in self._state.values()]
            self._write(peer_id, {"kind": "replay", "ops": ops})
            self._write(peer_id, self._status())
            if current is not None:  # under way: this worker applies it too, after the replay
                current.waiting.add(peer_id)
                self._write(peer_id, self._command_message(current))
        elif kind == "serving":
            peer.serving = True
            self.served_pids.add(peer.pid)
            self._broadcast_status()
        elif kind == "request":
            self._queue.append((peer_id, message))
        elif kind == "ack" and current is not None and message["seq"] == current.seq:
            current.waiting.discard(peer_id)
            if message.get("error"):
                current.failures[peer_id] = message["error"]
            else:
                current.applied += 1

    def _drop(self, peer_id: int) -> None:
        peer = self._peers.pop(peer_id, None)
        if peer is None:
            return
        self._selector.unregister(peer.sock)
        peer.sock.close()
        if self._current is not None:
            self._current.waiting.discard(peer_id)
        if peer.serving:
            self._broadcast_status()

    def _next(self) -> None:
        """Answer the command every live worker acknowledged; send the next one."""
        while True:
            if self._current is not None and not self._current.waiting:
                self._finish(self._current)
            elif self._current is None and self._queue:
                self._dispatch(*self._queue.popleft())
            else:
                return

    def _dispatch(self, origin: int, request: dict[str, Any]) -> None:
        joined = [peer_id for peer_id, peer in self._peers.items() if peer.joined]
        seq = next(self._seqs)
        command = _Command(
            origin,
            request["id"],
            seq,
            request["op"],
            request["name"],
            request.get("overrides"),
            set(joined),
        )
        self._current = command
        for peer_id in joined:
            self._write(peer_id, self._command_message(command))

    def _finish(self, command: _Command) -> None:
        self._current = None
        if command.applied:  # some worker changed: a worker starting later replays it
            slot, overrides = command.name, command.overrides
            if command.op == "weights":  # beside the model's load; weights add up
                slot = f"weights {command.name}"
                before = self._state.get(slot, ("", "", None))[2] or {}
                overrides = {**before, **_route_keys(command.name, overrides or {})}
            self._state.pop(slot, None)
            self._state[slot] = (command.op, command.name, overrides)
        failures = command.failures
        error = failures.get(command.origin) or next(iter(failures.values()), None)
        if command.origin in self._peers:
            self._write(command.origin, {"kind": "reply", "id": command.request_id, "error": error})

    @staticmethod
    def _command_message(command: _Command) -> dict[str, Any]:
        return {
            "kind": "command",
            "seq": command.seq,
            "op": command.op,
            "name": command.name,
            "overrides": command.overrides,
        }

    def _status(self) -> dict[str, Any]:
        serving = sum(peer.serving for peer in self._peers.values())
        unready = None
        if serving < self.ready_min_workers:
            unready = (
                f"{serving} of {self.workers} workers serve "
                f"(--ready-min-workers {self.ready_min_workers})"
            )
        return {
            "kind": "workers",
            "serving": serving,
            "workers": self.workers,
            "restarts": self._restarts,
            "unready": unready,
        }

    def _broadcast_status(self) -> None:
        status = self._status()
        for peer_id in [peer_id for peer_id, peer in self._peers.items() if peer.joined]:
            self._write(peer_id, status)

    def _write(self, peer_id: int, message: dict[str, Any]) -> None:
        peer = self._peers.get(peer_id)
        if peer is None:
            return
        try:
            peer.sock.sendall(_encode(message))
        except OSError:
            self._drop(peer_id)


class SupervisorLink:
    """A worker's end of its socket pair with the supervisor.

    ``join`` catches up with the loads and unloads made before this worker started,
    then a thread applies the relayed ones and keeps ``unready`` (why readiness is
    false, or None) and the restart counter of ``/metrics`` up to date. ``on_gone``
    runs when the supervisor's end closes (it died): by default this worker stops.
    """

    def __init__(
        self,
        sock: socket.socket,
        repository: ModelRepository | None,
        on_gone: Callable[[], None] | None = None,
        weights: Callable[[str, dict[str, Any]], object] | None = None,
    ) -> None:
        self.repository = repository  # this worker's own
        self.weights = weights  # sets a model's weights in this worker's routers
        self.unready: str | None = None
        self._sock = sock
        self._incoming = self._messages()
        self._on_gone = on_gone or _stop_this_worker
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}
        self._restarts = 0

    def join(self) -> None:
        """Say hello, apply the supervisor's replay here, then follow it in a thread."""
        self._send({"kind": "hello", "pid": os.getpid()})
        for message in self._incoming:
            if message["kind"] == "replay":
                for op, name, overrides in message["ops"]:
                    if not (op == "load" and not overrides and self._ready(name)):  # built so
                        self._apply(op, name, overrides)
                break
            self._handle(message)
        else:
            raise SystemExit("mlserve: the worker supervisor is gone")
        threading.Thread(target=self._listen, daemon=True, name="state-listener").start()

    def serving(self) -> None:
        """Tell the supervisor this worker listens (it counts toward readiness)."""
        try:
            self._send({"kind": "serving"})
        except OSError:  # the supervisor is gone: the listener stops this worker
            logger.warning("the worker supervisor is gone")

    async def relay(self, op: str, name: str, overrides: dict[str, Any] | None = None) -> None:
        """Have every worker apply ``op`` to ``name`` (a load with ``overrides``, its config
        override); raise the error one of them raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        request_id = next(self._ids)
        self._pending[request_id] = (loop, future)
        self._send(
            {"kind": "request", "id": request_id, "op": op, "name": name, "overrides": overrides}
        )
        try:
            error = await asyncio.wait_for(future, REPLY_TIMEOUT_SECONDS)
        finally:
            self._pending.pop(request_id, None)
        if error:
            raise _as_exception(error)

    def _send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._sock.sendall(_encode(message))

    def _messages(self) -> Iterator[dict[str, Any]]:
        """The messages read from the supervisor until it closes (or dies: a reset)."""
        with self._sock.makefile("rb") as stream:
            try:
                for line in stream:
                    yield json.loads(line)
            except ConnectionError:
                return

    def _listen(self) -> None:
        for message in self._incoming:
            self._handle(message)
        self._on_gone()

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["kind"]
        if kind == "reply":
            loop, future = self._pending.get(message["id"], (None, None))
            if loop is not None and future is not None:
                loop.call_soon_threadsafe(_settle, future, message["error"])
        elif kind == "command":
            error = self._apply(message["op"], message["name"], message.get("overrides"))
            self._send({"kind": "ack", "seq": message["seq"], "error": error})
        elif kind == "workers":
            self.unready = message["unready"]
            self._count_restarts(message["restarts"])

    def _count_restarts(self, total: int) -> None:
        if total > self._restarts:
            from mlserve.monitoring.metrics import WORKER_RESTARTS

            WORKER_RESTARTS.inc(total - self._restarts)
            self._restarts = total

    def _ready(self, name: str) -> bool:
        entries = (
            [e for e in self.repository.index() if e["name"] == name] if self.repository else []
        )
        return bool(entries) and all(e["state"] == "READY" for e in entries)

    def _apply(
        self, op: str, name: str, overrides: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Run one relayed load/unload on this worker's own repository."""
        try:
            if op == "weights":
                if self.weights is None:
                    raise errors.ModelNotFound(f"no routers: cannot set weights of {name}")
                self.weights(name, overrides or {})
                return None
            if self.repository is None:
                raise errors.ModelNotFound(f"no model repository: cannot {op} {name}")
            repository = self.repository
            asyncio.run(
                repository.load(name, overrides) if op == "load" else repository.unload(name)
            )
        except Exception as exc:
            if errors.status_of(exc) == 500:  # a fault; a failed load logged its own reason
                logger.exception("%s of %s failed in worker %d", op, name, os.getpid())
            return {"type": type(exc).__name__, "message": str(exc), "pid": os.getpid()}
        return None


class SharedRepository:
    """A worker's repository: loads and unloads go through the relay to every worker."""

    def __init__(self, inner: ModelRepository, link: SupervisorLink) -> None:
        self.inner = inner
        self._link = link

    def __getattr__(self, name: str) -> Any:  # resolve_label and the like: the worker's own
        return getattr(self.inner, name)

    def index(self) -> list[dict[str, Any]]:
        return self.inner.index()

    async def load(self, name: str, overrides: dict[str, Any] | None = None) -> None:
        await self._link.relay("load", name, overrides)

    async def unload(self, name: str) -> None:
        await self._link.relay("unload", name)

    async def set_weights(self, name: str, weights: dict[str, Any]) -> None:
        """Every worker sets ``name``'s weights (docs/graphs.md#changing-weights-while-serving)."""
        await self._link.relay("weights", name, weights)


def _route_keys(name: str, weights: dict[str, Any]) -> dict[str, Any]:
    """Weights by route key (``v2`` and ``m:v2`` are one variant): the replay's merge
    keeps one entry per variant, the latest."""
    return {key if ":" in key else f"{name}:{key}": weight for key, weight in weights.items()}


def _settle(future: asyncio.Future[Any], error: object) -> None:
    if not future.done():
        future.set_result(error)


def _stop_this_worker() -> None:
    """The supervisor died: drain and end, rather than serve on unsupervised."""
    logger.warning("the worker supervisor is gone: worker %d stops", os.getpid())
    os.kill(os.getpid(), signal.SIGTERM)


def _as_exception(error: dict[str, Any]) -> Exception:
    """The error a worker raised, as the same class when it is one of mlserve's."""
    cls = getattr(errors, error["type"], None)
    if isinstance(cls, type) and issubclass(cls, errors.MLServeError):
        return cls(error["message"])
    return errors.ModelError(f"worker {error['pid']}: {error['type']}: {error['message']}")


def _readiness_gate(link: SupervisorLink) -> ServerHandler:
    """A server handler: ``/v2/health/ready`` answers 503 while ``link`` says too few
    workers serve; otherwise the graph answers it as usual."""

    @answers_only(lambda method, path: method == "GET" and path in READINESS_PATHS)
    @suspends_for(lambda event: False)
    async def short_of_workers(server: Serving, event: Event) -> Response | None:
        reason = link.unready
        if reason is None:
            return None
        return Response({"ready": False, "error": reason}, status_code=503)

    return short_of_workers


def share_model_state(server: Serving) -> SupervisorLink | None:
    """In a worker of ``--workers N``: catch up with the workers' model state, route the
    server's repository through the relay and gate its readiness on the workers serving.
    Outside one: None."""
    fd = os.environ.pop(CONTROL_FD_ENV, None)  # not for the processes this one starts
    if not fd:
        return None
    try:
        sock = socket.socket(fileno=int(fd))
    except (OSError, ValueError):
        logger.warning("no model-state relay on fd %s: this worker's loads stay its own", fd)
        return None
    link = SupervisorLink(sock, server.repository, weights=partial(apply_weights, server))
    link.join()
    if server.repository is not None:
        server.repository = SharedRepository(server.repository, link)
    server.add_handler(_readiness_gate(link))
    return link
