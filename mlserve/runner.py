"""Run a GraphServer on the network until SIGTERM: HTTP (mlserve's own
HTTP/1.1 face, or the ASGI app under uvicorn) and, optionally, gRPC in one
event loop; or supervise N such worker processes that share the ports
(SO_REUSEPORT: the kernel spreads connections).

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
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Generator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol

from mlserve.core.sockets import bind_socket

if TYPE_CHECKING:
    import grpc
    import uvicorn

    from mlserve.core.limits import ServerLimits
    from mlserve.core.settings import FaceSettings
    from mlserve.http.app import ASGIApp
    from mlserve.server.graph_server import GraphServer

__all__ = ["WORKER_ENV", "run_server", "supervise", "worker_command"]

logger = logging.getLogger("mlserve.server")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# The index of a worker of `--workers N` (only worker 0 announces the server).
WORKER_ENV = "MLSERVE_WORKER"


def _http_server(
    app: ASGIApp, settings: FaceSettings, drain_timeout: float = 0.0
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
    )
    return HTTPServer(config)


class _Face(Protocol):
    """An HTTP face the runner starts and stops."""

    async def serve(self, sock: socket.socket) -> None: ...

    def stop(self) -> None: ...


class _ASGIFace:
    """The ASGI app under uvicorn (``--http asgi``)."""

    def __init__(self, server: GraphServer, settings: FaceSettings) -> None:
        from mlserve.http.app import create_app

        self.http = _http_server(
            create_app(server, settings), settings, server.limits.drain_timeout
        )

    async def serve(self, sock: socket.socket) -> None:
        await self.http.serve(sockets=[sock])

    def stop(self) -> None:
        self.http.should_exit = True


class _LeanFace:
    """mlserve's own HTTP/1.1 server (the default)."""

    def __init__(self, server: GraphServer, settings: FaceSettings) -> None:
        from mlserve.http.server import HTTPServer

        self.http = HTTPServer(server, settings)
        self.stopping = asyncio.Event()
        self.drain_timeout = server.limits.drain_timeout

    async def serve(self, sock: socket.socket) -> None:
        await self.http.start(sock)
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


HTTP_FACES: dict[str, Callable[[GraphServer, FaceSettings], _Face]] = {
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
) -> None:
    sock = bind_socket(host, port, reuse_port)
    http = HTTP_FACES[http_face](server, settings)
    grpc_server = None
    if grpc_port:
        from mlserve.grpc.service import start_grpc_server

        grpc_server = await start_grpc_server(server, host, grpc_port, settings=settings)
    tfs_server = None
    if tfs_grpc_port:
        from mlserve.grpc.service import start_grpc_server

        tfs_server = await start_grpc_server(
            server, host, tfs_grpc_port, services="tfserving", settings=settings
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
    announce()
    await http.serve(sock)
    drain()
    await asyncio.gather(*draining)


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
) -> None:
    """Serve ``server`` (initialised) until SIGTERM/SIGINT, then drain and flush.

    ``http_face``: "mlserve" (its own HTTP/1.1 server) or "asgi" (the ASGI app under uvicorn).
    ``tfs_grpc_port``: TF Serving's gRPC services alone on a port of their own (8500).
    ``drained``: called once the faces have drained, before the flush (another face stops).
    ``settings``: the faces' ``FaceSettings`` (auth, limits; defaults when None).
    """
    import uvloop

    from mlserve.core.settings import FaceSettings

    settings = settings or FaceSettings()
    server.hide_errors = server.hide_errors or settings.hide_errors
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
            )
        )
    drained()
    server.wait_for_completion()


def supervise(command: list[str], workers: int) -> int:
    """Run ``workers`` copies of ``command``; forward SIGTERM/SIGINT; 0 when all exit 0
    (or die of the forwarded signal while still starting). Repository loads and
    unloads through any worker reach every worker (``mlserve.server.shared``)."""
    from mlserve.server.shared import CONTROL_FD_ENV, StateRelay

    relay = StateRelay(workers)  # repository loads/unloads reach every worker
    procs = [
        subprocess.Popen(
            command,
            env={**os.environ, WORKER_ENV: str(index), CONTROL_FD_ENV: str(relay.fd_of(index))},
            pass_fds=[relay.fd_of(index)],
        )
        for index in range(workers)
    ]
    relay.start()
    forwarded = {0}  # exit codes that count as clean

    def forward(sig: int, frame: FrameType | None) -> None:
        forwarded.add(-sig)  # a worker still starting dies of it: it had nothing to drain
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(sig)

    previous = {sig: signal.signal(sig, forward) for sig in _STOP_SIGNALS}
    try:
        codes = [proc.wait() for proc in procs]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    failed = [code for code in codes if code not in forwarded]
    if failed:
        print(f"mlserve: {len(failed)} of {workers} workers failed: {codes}", file=sys.stderr)
    return 1 if failed else 0


def worker_command(argv: list[str]) -> list[str]:
    """The command line of one worker of ``mlserve <argv>``."""
    return [sys.executable, "-m", "mlserve", *argv, "--workers", "1", "--reuse-port"]
