"""Run a GraphServer on the network until SIGTERM: HTTP (mlserve's own
HTTP/1.1 face, or the ASGI app under uvicorn) and, optionally, gRPC in one
event loop; or supervise N such worker processes that share the ports
(SO_REUSEPORT: the kernel spreads connections), restarting one that dies.

SIGTERM or SIGINT drains: readiness answers 503 at once (for ``drain_delay``
seconds new requests are still taken, so a load balancer sees it first), then
no new connections are accepted, requests in flight get ``drain_timeout``
seconds to complete, ``server.wait_for_completion()`` flushes (the model-log
stream, background flows) and the process exits 0.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from mlserve.core.sockets import bind_socket

if TYPE_CHECKING:
    import grpc
    import uvicorn

    from mlserve.core.limits import ServerLimits
    from mlserve.core.settings import FaceSettings
    from mlserve.core.tls import TLSSettings
    from mlserve.http.app import ASGIApp
    from mlserve.server.graph_server import GraphServer

__all__ = [
    "WORKERS_ENV",
    "WORKER_ENV",
    "restart_delay",
    "run_server",
    "supervise",
    "worker_command",
    "worker_slot",
]

logger = logging.getLogger("mlserve.server")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The index of a worker of `--workers N` (only worker 0 announces the server).
WORKER_ENV = "MLSERVE_WORKER"
WORKERS_ENV = "MLSERVE_WORKERS"  # and N, which the web console shows


def worker_slot() -> tuple[int, int] | None:
    """(index, count) in a worker of ``serve --workers N``; None outside one."""
    count = os.environ.get(WORKERS_ENV, "")
    if not count.isdigit():
        return None
    return int(os.environ.get(WORKER_ENV, "0") or 0), int(count)


def _http_server(
    app: ASGIApp, settings: FaceSettings, drain_timeout: float = 0.0, tls: TLSSettings | None = None
) -> uvicorn.Server:
    import uvicorn

    class HTTPServer(uvicorn.Server):
        # The runner owns the signals: uvicorn's own handler re-raises them after
        # shutdown, which would end the process with -SIGTERM instead of 0.
        @contextmanager
        def capture_signals(self) -> Generator[None, None, None]:
            yield

    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        http="httptools",
        timeout_keep_alive=int(max(1, settings.keep_alive_timeout)),
        limit_concurrency=settings.max_connections,
        # uvicorn takes whole seconds: a fraction rounds up
        timeout_graceful_shutdown=math.ceil(drain_timeout) or None,
        **(_uvicorn_tls(tls) if tls is not None and tls.enabled else {}),
    )
    return HTTPServer(config)


def _uvicorn_tls(tls: TLSSettings) -> dict[str, Any]:
    """uvicorn's own options for the same files (docs/security.md#tls)."""
    import ssl

    options: dict[str, Any] = {"ssl_certfile": tls.certfile, "ssl_keyfile": tls.keyfile or None}
    if tls.mutual:
        options.update(ssl_ca_certs=tls.ca_certs, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


class _Face(Protocol):
    """An HTTP face the runner starts and stops."""

    async def serve(self, sock: socket.socket) -> None: ...

    def stop(self) -> None: ...


class _ASGIFace:
    """The ASGI app under uvicorn (``--http asgi``)."""

    def __init__(self, server: GraphServer, settings: FaceSettings, tls: TLSSettings) -> None:
        from mlserve.http.app import create_app

        self.http = _http_server(
            create_app(server, settings), settings, server.limits.drain_timeout, tls
        )

    async def serve(self, sock: socket.socket) -> None:
        await self.http.serve(sockets=[sock])

    def stop(self) -> None:
        self.http.should_exit = True


class _LeanFace:
    """mlserve's own HTTP/1.1 server (the default)."""

    def __init__(self, server: GraphServer, settings: FaceSettings, tls: TLSSettings) -> None:
        from mlserve.http.server import HTTPServer

        self.http = HTTPServer(server, settings)
        self.tls = tls.server_context() if tls.enabled else None
        self.stopping = asyncio.Event()
        self.drain_timeout = server.limits.drain_timeout

    async def serve(self, sock: socket.socket) -> None:
        await self.http.start(sock, self.tls)
        await self.stopping.wait()
        try:
            await asyncio.wait_for(self.http.shutdown(), self.drain_timeout or None)
        except TimeoutError:
            left = list(self.http.connections)
            logger.warning("drain timeout: closing %d connections still busy", len(left))
            for conn in left:
                conn.transport.abort()

    def stop(self) -> None:
        self.stopping.set()


HTTP_FACES: dict[str, Callable[[GraphServer, FaceSettings, TLSSettings], _Face]] = {
    "mlserve": _LeanFace,
    "asgi": _ASGIFace,
}


async def _serve(
    server: GraphServer,
    host: str,
    port: int,
    grpc_port: int | None,
    reuse_port: bool,
    announce: Callable[[], None],
    http_face: str,
    tfs_grpc_port: int | None,
    settings: FaceSettings,
    tls: TLSSettings,
) -> None:
    sock = bind_socket(host, port, reuse_port)
    http = HTTP_FACES[http_face](server, settings, tls)
    grpc_server = None
    if grpc_port:
        from mlserve.grpc.service import start_grpc_server

        grpc_server = await start_grpc_server(server, host, grpc_port, settings=settings, tls=tls)
    tfs_server = None
    if tfs_grpc_port:
        from mlserve.grpc.service import start_grpc_server

        tfs_server = await start_grpc_server(
            server, host, tfs_grpc_port, services="tfserving", settings=settings, tls=tls
        )
    draining: list[asyncio.Task[Any]] = []

    def drain() -> None:
        if draining:
            return
        logger.info("stopping: readiness is false, draining requests in flight")
        server.draining = True  # readiness answers 503 before anything else changes
        grpc_servers = [s for s in (grpc_server, tfs_server) if s is not None]
        draining.append(asyncio.ensure_future(_stop(http, grpc_servers, server.limits)))

    loop = asyncio.get_running_loop()
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, drain)
    # What start-up left alive (modules, the graph, loaded models) lives as long as the
    # process: out of the collector's sight, a full collection no longer walks it on
    # the request path.
    gc.collect()
    gc.freeze()
    from mlserve.server.console import start_history

    history = start_history(server)  # the web console's charts (docs/console.md)
    announce()
    try:
        await http.serve(sock)
        drain()
        await asyncio.gather(*draining)
    finally:
        if history is not None:
            history.cancel()


async def _stop(http: _Face, grpc_servers: list[grpc.aio.Server], limits: ServerLimits) -> None:
    """Stop taking requests after ``drain_delay``; gRPC calls get ``drain_timeout``."""
    if limits.drain_delay:
        await asyncio.sleep(limits.drain_delay)
    http.stop()
    await asyncio.gather(*(s.stop(limits.drain_timeout or None) for s in grpc_servers))


def run_server(
    server: GraphServer,
    host: str,
    port: int,
    grpc_port: int | None = None,
    reuse_port: bool = False,
    announce: Callable[[], None] = lambda: None,
    http_face: str = "mlserve",
    tfs_grpc_port: int | None = None,
    drained: Callable[[], None] = lambda: None,
    settings: FaceSettings | None = None,
    tls: TLSSettings | None = None,
) -> None:
    """Serve ``server`` (initialised) until SIGTERM/SIGINT, then drain and flush.

    ``http_face``: "mlserve" (its own HTTP/1.1 server) or "asgi" (the ASGI app under uvicorn).
    ``tfs_grpc_port``: TF Serving's gRPC services alone on a port of their own (8500).
    ``drained``: called once the faces have drained, before the flush (another face stops).
    ``settings``: the faces' ``FaceSettings`` (auth, limits; defaults when None).
    ``tls``: the certificate every face (HTTP and gRPC) serves TLS with (None: plain TCP).
    """
    import uvloop

    from mlserve.core.settings import FaceSettings
    from mlserve.core.tls import TLSSettings
    from mlserve.protocol.nonfinite import set_json_nonfinite

    settings = settings or FaceSettings()
    tls = tls or TLSSettings()
    server.hide_errors = server.hide_errors or settings.hide_errors
    set_json_nonfinite(settings.json_nonfinite)  # docs/protocol.md#nan-and-infinities
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(
            _serve(
                server,
                host,
                port,
                grpc_port,
                reuse_port,
                announce,
                http_face,
                tfs_grpc_port,
                settings,
                tls,
            )
        )
    drained()
    server.wait_for_completion()


# A worker that died is restarted after a back-off: 0.5 s, then twice as long at each
# death in a row, up to 30 s; a worker that lived STABLE_SECONDS starts it again.
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
STABLE_SECONDS = 60.0
# A worker that fails this many times in a row before it serves (a broken file, a model
# that cannot load) is not started again: the supervisor stops the others and exits with
# the worker's status (2 for a usage error, else 1).
START_FAILURES = 3


def restart_delay(previous: float, lived: float) -> float:
    """Seconds before restarting a worker that died after ``lived`` seconds, when the
    restart before it waited ``previous`` seconds (0: the worker's first death)."""
    if not previous or lived >= STABLE_SECONDS:
        return FIRST_BACKOFF_SECONDS
    return min(2 * previous, MAX_BACKOFF_SECONDS)


@dataclass
class _Worker:
    """One worker of ``--workers N``: its process, and how its restarts went."""

    index: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restart_at: float | None = None  # when its next process starts (it died)
    delay: float = 0.0  # the back-off of its last restart
    start_failures: int = 0  # deaths in a row before serving
    code: int | None = None  # how its last process ended, once stopping


class _Supervisor:
    """Starts the workers, restarts one that dies, forwards SIGTERM/SIGINT."""

    def __init__(self, command: list[str], workers: int, ready_min_workers: int) -> None:
        from mlserve.server.shared import StateRelay

        self.command = command
        self.relay = StateRelay(workers, ready_min_workers).start()
        self.workers = [_Worker(index) for index in range(workers)]
        self.forwarded: set[int] = set()  # a worker that dies of one of these just stopped
        self.restarts = 0
        self.gave_up: int | None = None  # the exit status, once a worker could not start

    def forward(self, sig: int, frame: FrameType | None = None) -> None:
        """Pass a stop signal to every worker; none restarts from now on."""
        self.forwarded.add(sig)
        for worker in self.workers:
            worker.restart_at = None
            if worker.proc is not None:
                worker.proc.send_signal(sig)

    def run(self, wakeup: int) -> int:
        """Until every worker ended; ``wakeup`` turns readable at each signal (a child's
        end, a stop)."""
        for worker in self.workers:
            if not self.forwarded:
                self._start(worker)
        while True:
            now = time.monotonic()
            for worker in self.workers:
                if worker.proc is not None and worker.proc.poll() is not None:
                    self._ended(worker, worker.proc, now)
                if worker.restart_at is not None and worker.restart_at <= now:
                    self._start(worker)
            pending = [w.restart_at - now for w in self.workers if w.restart_at is not None]
            if not pending and all(worker.proc is None for worker in self.workers):
                break
            if select.select([wakeup], [], [], min(pending, default=None))[0]:
                os.read(wakeup, 4096)
        return self._exit_code()

    def _start(self, worker: _Worker) -> None:
        from mlserve.server.shared import CONTROL_FD_ENV

        end = self.relay.add_worker()  # this worker's end of its relay socket pair
        env = {
            **os.environ,
            WORKER_ENV: str(worker.index),
            WORKERS_ENV: str(len(self.workers)),
            CONTROL_FD_ENV: str(end.fileno()),
        }
        try:
            worker.proc = subprocess.Popen(self.command, env=env, pass_fds=[end.fileno()])
        finally:
            end.close()
        worker.started, worker.restart_at = time.monotonic(), None
        for sig in self.forwarded:  # a stop that came while it was being started
            worker.proc.send_signal(sig)

    def _ended(self, worker: _Worker, proc: subprocess.Popen[bytes], now: float) -> None:
        worker.proc = None
        code = proc.returncode
        if self.forwarded or self.gave_up is not None:
            worker.code = code
            return
        served = proc.pid in self.relay.served_pids
        worker.start_failures = 0 if served else worker.start_failures + 1
        how = f"signal {-code}" if code < 0 else f"exit {code}"
        if worker.start_failures >= START_FAILURES:
            print(
                f"mlserve: worker {worker.index} failed {START_FAILURES} times in a row before "
                f"serving ({how}); giving up",
                file=sys.stderr,
                flush=True,
            )
            self.gave_up = code if code > 0 else 1  # 2: the worker's usage error
            for other in self.workers:
                other.restart_at = None
                if other.proc is not None:
                    other.proc.send_signal(signal.SIGTERM)
            return
        worker.delay = restart_delay(worker.delay, now - worker.started)
        worker.restart_at = now + worker.delay
        self.restarts += 1
        self.relay.set_restarts(self.restarts)
        print(
            f"mlserve: worker {worker.index} died ({how}); restarting in {worker.delay:g} s "
            f"(restart {self.restarts})",
            file=sys.stderr,
            flush=True,
        )

    def _exit_code(self) -> int:
        if self.gave_up is not None:
            return self.gave_up
        clean = {0} | {-sig for sig in self.forwarded}  # stopped while still starting
        codes = [worker.code for worker in self.workers if worker.code is not None]
        failed = [code for code in codes if code not in clean]
        if failed:
            print(
                f"mlserve: {len(failed)} of {len(self.workers)} workers failed: {codes}",
                file=sys.stderr,
            )
        return 1 if failed else 0


def supervise(command: list[str], workers: int, ready_min_workers: int = 1) -> int:
    """Run ``workers`` copies of ``command`` until SIGTERM/SIGINT, which they get too;
    restart one that dies (docs/deployment.md#when-a-worker-dies). 0 when all exit 0 at
    the stop (or die of the forwarded signal while still starting); 1 when some failed
    then; the status of a worker that failed ``START_FAILURES`` times in a row before
    serving (2 for a usage error, else 1). Repository
    loads and unloads through any worker reach every worker, and readiness is 503 while
    fewer than ``ready_min_workers`` serve (``mlserve.server.shared``)."""
    supervisor = _Supervisor(command, workers, ready_min_workers)
    wakeup, wakeup_writer = os.pipe()
    os.set_blocking(wakeup, False)
    os.set_blocking(wakeup_writer, False)
    handlers: dict[int, Callable[[int, FrameType | None], None]] = {
        sig: supervisor.forward for sig in _STOP_SIGNALS
    }
    handlers[signal.SIGCHLD] = lambda sig, frame: None  # only to wake the loop
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    previous_wakeup = signal.set_wakeup_fd(wakeup_writer, warn_on_full_buffer=False)
    try:
        return supervisor.run(wakeup)
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wakeup)
        os.close(wakeup_writer)


def start_child(argv: list[str]) -> subprocess.Popen[bytes]:
    """``mlserve <argv>`` as a child process that ends with this one (the kernel's
    parent-death signal, and the child's own watchdog: ``mlserve.function.lifeline``)."""
    from mlserve.function.lifeline import PARENT_PID_ENV, die_with_parent

    env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
    # PR_SET_PDEATHSIG follows the forking thread: only the main thread lives as long as us.
    tie = die_with_parent if threading.current_thread() is threading.main_thread() else None
    return subprocess.Popen(
        [sys.executable, "-m", "mlserve", *argv],
        env=env,
        preexec_fn=tie,  # noqa: PLW1509 - prctl only, no locks taken
    )


def worker_command(argv: list[str]) -> list[str]:
    """The command line of one worker of ``mlserve <argv>``."""
    return [sys.executable, "-m", "mlserve", *argv, "--workers", "1", "--reuse-port"]
