"""mlserve's own CPU time per request, in-process: no sockets, no load generator.

    python -m benchmarks.hotpath [--requests 20000] [--rounds 5] [--concurrency 8]

Serves the benchmark's echo model (benchmarks/servers/mlserve_model.py) and
drives each HTTP face with ``--concurrency`` clients on one uvloop loop: the
HTTP/1.1 protocol (mlserve.http.server) fed raw request bytes through a
transport that only collects the answer, and the ASGI app (mlserve.http.app)
called with its scope and message callables. Prints process CPU microseconds
per request (loop and worker threads), best of the rounds, the faces
alternated so that the machine's noise falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import uvloop

from mlserve.cli import load_function
from mlserve.http.app import create_app
from mlserve.http.server import HTTPProtocol, HTTPServer

HERE = Path(__file__).resolve().parent
BODY = json.dumps(
    {
        "inputs": [
            {"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}
        ]
    }
).encode()
PATH = b"/v2/models/echo/infer"


def http_request(
    path: bytes,
    body: bytes,
    content_type: bytes = b"application/json",
    headers: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """The bytes of a keep-alive POST of ``body`` to ``path`` (JSON unless said)."""
    lines = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode()) for k, v in headers)
    return (
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n%s"
        b"Content-Length: %d\r\n\r\n%s" % (path, content_type, lines, len(body), body)
    )


REQUEST = http_request(PATH, BODY)


class _Transport:
    """Collects what the protocol writes; wakes the client when an answer is out."""

    def __init__(self) -> None:
        self.answered: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> None:
        if not data.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(data[:200])
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None  # no peer address: every client counts as one

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass  # nothing is buffered


async def _protocol_client(owner: HTTPServer, count: int, request: bytes = REQUEST) -> None:
    transport = _Transport()
    protocol = HTTPProtocol(owner)
    protocol.connection_made(transport)
    loop = asyncio.get_running_loop()
    for _ in range(count):
        transport.answered = loop.create_future()
        protocol.data_received(request)
        await transport.answered


async def _asgi_client(app: Any, count: int) -> None:
    scope = {
        "type": "http",
        "method": "POST",
        "path": PATH.decode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(BODY)).encode()),
        ],
    }
    message = {"type": "http.request", "body": BODY, "more_body": False}

    async def receive() -> dict[str, Any]:
        return message

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start" and message["status"] != 200:
            raise RuntimeError(message)

    for _ in range(count):
        await app(scope, receive, send)


async def _round(
    face: str, server: Any, requests: int, concurrency: int, request: bytes = REQUEST
) -> float:
    """CPU µs per request of ``concurrency`` clients (``request``: the protocol face's bytes)."""
    per_client = requests // concurrency
    if face == "protocol":
        owner = HTTPServer(server)
        owner.loop = asyncio.get_running_loop()
        clients = [_protocol_client(owner, per_client, request) for _ in range(concurrency)]
    else:
        app = create_app(server)
        clients = [_asgi_client(app, per_client) for _ in range(concurrency)]
    started = time.process_time()
    await asyncio.gather(*clients)
    return (time.process_time() - started) / (per_client * concurrency) * 1e6


def echo_server() -> Any:
    """The benchmark's echo model (benchmarks/servers/mlserve_model.py), initialised."""
    return initialised(load_function(str(HERE / "servers" / "mlserve_model.py")))


def initialised(fn: Any) -> Any:
    """``fn``'s graph server, initialised as ``mlserve serve`` does."""
    server = fn.to_graph_server()
    server.init_states(namespace=fn.namespace)
    server.init_object(fn.namespace)
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--faces", nargs="+", default=["protocol", "asgi"])
    args = parser.parse_args(argv)
    server = echo_server()
    best: dict[str, float] = {}
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_round(args.faces[0], server, 2000, args.concurrency))  # warm-up
        for _ in range(args.rounds):
            for face in args.faces:
                us = runner.run(_round(face, server, args.requests, args.concurrency))
                best[face] = min(best.get(face, us), us)
    for face, us in best.items():
        print(f"{face:9} {us:6.1f} us CPU per request")


if __name__ == "__main__":
    main()
