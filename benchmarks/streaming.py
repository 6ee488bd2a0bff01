"""Streaming on loopback: chunks per second and time to first chunk, mlserve against
MLServer, over server-sent events (``infer_stream``) and gRPC (``ModelStreamInfer``).

    python -m benchmarks.streaming [--duration 5] [--repeat 3] [--streams 8] [--chunks 100]
    python -m benchmarks.streaming --servers MLServer --faces sse --no-doc

Each server serves a model that yields ``--chunks`` one-word chunks (a BYTES [1] tensor
each) for a V2 request of one INT32 (the count): on mlserve an async generator
``predict`` (``tokens``) and a sync one (``tokens_sync``, produced on a thread); on
MLServer an async generator ``predict_stream``, with ``parallel_workers: 0`` (its worker
pool forwards ``predict`` alone, so a pooled model streams one chunk). Chunks per second:
``--streams`` streams at once, each starting the next when it ends, for ``--duration``
seconds, driven by ``wrk`` (SSE) and ``h2load`` (gRPC), streams/s times the chunk count.
Time to first chunk: one stream at a time, ``--ttfc-streams`` of them, from the request's
last byte sent to the first chunk read, by a Python client (asyncio sockets for SSE,
grpc.aio for gRPC); the same client first checks that each server sends every chunk and
no error. Each server runs alone, started afresh every round; the rounds alternate the
servers and the table gives the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    HERE,
    arguments,
    command_line,
    cpu_seconds,
    ensure_env,
    exit_on_sigterm,
    free_port,
    grouped,
    heading,
    http_ok,
    median_of,
    progress,
    publish,
    running,
    save_raw,
    table_lines,
    version,
    wrk,
)
from benchmarks.grpc_load import grpc_frame, h2load
from benchmarks.http_load import mlserver_start

STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
FACES = ("sse", "grpc")


@dataclass
class Target:
    """One streaming model of one server, and how its gRPC stream answers are framed:
    Triton's ``ModelStreamInferResponse`` (mlserve) or a bare ``ModelInferResponse``
    (MLServer's ModelStreamInfer)."""

    label: str
    model: str
    triton_stream: bool


@dataclass
class Server:
    name: str
    targets: tuple[Target, ...]
    command: Callable[[int, int, Path], list[str]]  # (http port, gRPC port, work folder)
    env: str | None = None


def _mlserve(http: int, grpc: int, workdir: Path) -> list[str]:
    model = str(HERE / "servers" / "stream_mlserve.py")
    return [sys.executable, "-m", "mlserve", "serve", model, "--port", str(http)] + [
        "--grpc-port",
        str(grpc),
    ]


def _mlserver(http: int, grpc: int, workdir: Path) -> list[str]:
    return mlserver_start(
        workdir, http, grpc, "stream_mlserver.py", ("tokens", "stream_mlserver.Tokens")
    )


SERVERS = [
    Server(
        "mlserve",
        (
            Target("mlserve", "tokens", True),
            Target("mlserve (sync generator)", "tokens_sync", True),
        ),
        _mlserve,
    ),
    Server("MLServer", (Target("MLServer", "tokens", False),), _mlserver, env="mlserver"),
]


def v2_body(chunks: int) -> bytes:
    tensor = {"name": "input-0", "datatype": "INT32", "shape": [1], "data": [chunks]}
    return json.dumps({"inputs": [tensor]}).encode()


def grpc_request(model: str, chunks: int) -> bytes:
    from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="input-0", datatype="INT32", shape=[1]).contents.int_contents.append(
        chunks
    )
    return bytes(request.SerializeToString())


# ---- the Python client: checks and time to first chunk ----------------------------


@dataclass
class Stream:
    """What one stream gave the client."""

    chunks: int
    first_s: float  # request sent -> first chunk read
    total_s: float  # request sent -> stream ended
    error: str = ""


async def sse_stream(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> Stream:
    """POST ``request`` (a whole HTTP/1.1 request) on a kept-alive connection and read its
    event stream to the end, counting ``data:`` events as they arrive."""
    writer.write(request)
    start = time.perf_counter()
    head = b""
    while b"\r\n\r\n" not in head:
        data = await reader.read(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        head += data
    head, _, body = head.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200":
        return Stream(
            0, 0.0, time.perf_counter() - start, f"HTTP {status.decode()}: {body[:300]!r}"
        )
    fields = head.lower()
    chunked = b"transfer-encoding: chunked" in fields
    length = None if chunked else int(fields.split(b"content-length:")[1].split(b"\r\n")[0])
    chunks, first, seen, tail, error = 0, 0.0, 0, b"", ""
    while True:
        window = tail + body
        chunks += window.count(b"data: ")
        if chunks and not first:
            first = time.perf_counter() - start
        if b"event: error" in window and not error:
            error = window[window.index(b"event: error") :][:300].decode(errors="replace")
        seen += len(body)
        tail = window[-8:]
        if (chunked and tail.endswith(b"\r\n0\r\n\r\n")) or (not chunked and seen >= length):
            break
        body = await reader.read(65536)
        if not body:
            raise ConnectionError("the server closed the stream before its end")
    return Stream(chunks, first, time.perf_counter() - start, error)


async def grpc_stream(channel: Any, request: bytes, triton_stream: bool) -> Stream:
    """One ModelStreamInfer call: send ``request``, close the sending side, read every
    answer (raw bytes; an error in Triton's frame is read from its ``error_message``)."""
    from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb

    call = channel.stream_stream(STREAM_PATH)

    async def requests() -> AsyncIterator[bytes]:
        yield request

    chunks, first, error = 0, 0.0, ""
    start = time.perf_counter()
    async for answer in call(requests()):
        if not first:
            first = time.perf_counter() - start
        if triton_stream and answer[:1] == b"\x0a":  # field 1, error_message
            error = error or pb.ModelStreamInferResponse.FromString(answer).error_message
        else:
            chunks += 1
    return Stream(chunks, first, time.perf_counter() - start, error)


def http_request(port: int, model: str, chunks: int) -> bytes:
    body = v2_body(chunks)
    head = (
        f"POST /v2/models/{model}/infer_stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _streams(face: str, port: int, target: Target, chunks: int, count: int) -> list[Stream]:
    """``count`` streams, one after the other, on one connection (channel)."""
    if face == "sse":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = http_request(port, target.model, chunks)
        try:
            return [await sse_stream(reader, writer, request) for _ in range(count)]
        finally:
            writer.close()
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = grpc_request(target.model, chunks)
        return [await grpc_stream(channel, request, target.triton_stream) for _ in range(count)]


def one_at_a_time(face: str, port: int, target: Target, chunks: int, count: int) -> list[Stream]:
    return asyncio.run(_streams(face, port, target, chunks, count))


def check(face: str, port: int, target: Target, chunks: int, wait: float = 30) -> None:
    """The server sends every chunk of a stream and no error (gRPC retried while it starts)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            stream = one_at_a_time(face, port, target, chunks, 1)[0]
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    if stream.chunks != chunks or stream.error:
        raise RuntimeError(
            f"{target.label} over {face} sent {stream.chunks} of {chunks} chunks {stream.error}"
        )


# ---- the load ---------------------------------------------------------------------


def load(face: str, port: int, target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """``args.streams`` streams at once for ``duration`` seconds: streams/s, failures."""
    if face == "sse":
        url = f"http://127.0.0.1:{port}/v2/models/{target.model}/infer_stream"
        result = wrk(url, v2_body(args.chunks), args.streams, args.duration)
        return {"streams_s": result["rps"], "bad": sum(result["errors"].values())}
    with tempfile.NamedTemporaryFile(prefix="bench-stream-", suffix=".bin") as body:
        body.write(grpc_frame(grpc_request(target.model, args.chunks)))
        body.flush()
        result = h2load(port, Path(body.name), args.streams, args.duration, STREAM_PATH)
    return {"streams_s": result["rps"], "bad": result["bad"]}


def measure(
    face: str, port: int, pid: int, target: Target, args: argparse.Namespace
) -> dict[str, Any]:
    cpu = cpu_seconds(pid)
    result = load(face, port, target, args)
    chunks_s = result["streams_s"] * args.chunks
    cpu_us = (cpu_seconds(pid) - cpu) / max(chunks_s * args.duration, 1) * 1e6
    streams = one_at_a_time(face, port, target, args.chunks, args.ttfc_streams)
    firsts = sorted(s.first_s for s in streams)
    row = {
        "server": target.label,
        "face": face,
        "chunks_s": chunks_s,
        "cpu_us": cpu_us,
        "bad": result["bad"] + sum(1 for s in streams if s.error or s.chunks != args.chunks),
        "ttfc_p50_ms": statistics.median(firsts) * 1e3,
        "ttfc_p99_ms": firsts[min(len(firsts) - 1, int(0.99 * len(firsts)))] * 1e3,
        "total_p50_ms": statistics.median(s.total_s for s in streams) * 1e3,
    }
    progress(
        f"stream {target.label:24} {face:4} {chunks_s:9.0f} chunks/s  CPU {cpu_us:5.1f} us/chunk"
        f"  first chunk p50 {row['ttfc_p50_ms']:.2f} ms p99 {row['ttfc_p99_ms']:.2f} ms"
        + (f"  FAILED {row['bad']}" if row["bad"] else "")
    )
    return row


def run_server(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    grpc_port = free_port()
    model = server.targets[0].model

    def command(port: int, workdir: Path) -> list[str]:
        return server.command(port, grpc_port, workdir)

    def ready(port: int) -> bool:
        return http_ok(f"http://127.0.0.1:{port}/v2/models/{model}/ready")

    rows = []
    with running(command, server.name, ready=ready) as (port, pid, _):
        for face in args.faces:
            face_port = port if face == "sse" else grpc_port
            for target in server.targets:
                check(face, face_port, target, args.chunks)
                load(
                    face,
                    face_port,
                    target,
                    argparse.Namespace(**{**vars(args), "duration": args.warmup}),
                )
                rows.append(measure(face, face_port, pid, target, args))
    return rows


# ---- report -----------------------------------------------------------------------

Stats = dict[tuple[str, str], dict[str, float]]
_KEYS = ("chunks_s", "cpu_us", "ttfc_p50_ms", "ttfc_p99_ms", "total_p50_ms")


def medians(rows: list[dict[str, Any]]) -> Stats:
    """Per (server, face): the median over the rounds, failures summed; by face."""
    groups = grouped(rows, "server", "face")
    order = sorted(groups, key=lambda key: (FACES.index(key[1]), list(groups).index(key)))
    return {
        key: {**median_of(groups[key], *_KEYS), "bad": float(sum(r["bad"] for r in groups[key]))}
        for key in order
    }


def table(stats: Stats, args: argparse.Namespace) -> str:
    lines = heading(
        "Streaming: mlserve and MLServer, SSE and gRPC",
        command_line(
            "streaming",
            args,
            {
                "streams": 8,
                "chunks": 100,
                "ttfc_streams": 200,
                "faces": list(FACES),
                "servers": [s.name for s in SERVERS],
            },
        ),
        f"; MLServer {version('mlserver')}. A model yielding {args.chunks} one-word chunks "
        f"per request; chunks/s with {args.streams} streams at once ({args.duration:g} s "
        f"per point after a {args.warmup:g} s warm-up; wrk for SSE `infer_stream`, h2load "
        f"for gRPC `ModelStreamInfer`); time to first chunk over {args.ttfc_streams} streams "
        f"one at a time (a Python client); median of {args.repeat} alternating round(s), "
        "each server alone.",
    )
    header = ["server", "face", "chunks/s", "server CPU us/chunk", "first chunk p50 ms"]
    header += ["first chunk p99 ms", "whole stream p50 ms", "failed (all rounds)"]
    rows = [
        [name, face, f"{s['chunks_s']:,.0f}", f"{s['cpu_us']:.1f}", f"{s['ttfc_p50_ms']:.2f}"]
        + [f"{s['ttfc_p99_ms']:.2f}", f"{s['total_p50_ms']:.2f}", f"{s['bad']:.0f}"]
        for (name, face), s in stats.items()
    ]
    lines += table_lines(header, rows, labels=2)
    ratios = []
    for face in FACES:
        ours, peer = stats.get(("mlserve", face)), stats.get(("MLServer", face))
        if ours and peer:
            ratios.append(
                [face, f"{ours['chunks_s'] / peer['chunks_s']:.2f}x"]
                + [f"{peer['cpu_us'] / ours['cpu_us']:.2f}x"]
                + [f"{ours['ttfc_p50_ms']:.2f} vs {peer['ttfc_p50_ms']:.2f}"]
            )
    header = ["face", "mlserve/MLServer chunks/s", "MLServer/mlserve server CPU per chunk"]
    header.append("first chunk p50 mlserve vs MLServer (ms)")
    lines += ["", *table_lines(header, ratios)]
    return "\n".join([*lines, "", goals(stats, args.streams)])


def goals(stats: Stats, streams: int) -> str:
    lines = []
    for face in FACES:
        ours, peer = stats.get(("mlserve", face)), stats.get(("MLServer", face))
        if not (ours and peer):
            continue
        word = "SSE" if face == "sse" else "gRPC"
        speed = ours["chunks_s"] / peer["chunks_s"]
        lower = ours["ttfc_p50_ms"] < peer["ttfc_p50_ms"]
        lines += [
            f"- at least 5x MLServer's chunks per second over {word}: {speed:.2f}x, "
            + ("met" if speed >= 5 else "not met"),
            f"- a lower time to first chunk than MLServer's over {word}: "
            f"{ours['ttfc_p50_ms']:.2f} ms vs {peer['ttfc_p50_ms']:.2f} ms, "
            + ("met" if lower else "not met"),
        ]
    if not lines:
        return "Goals not evaluated: mlserve and MLServer were not both measured."
    return "\n".join(
        [f"Goals, async generator models, {streams} streams at once (p50 first chunk):", "", *lines]
    )


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0, warmup=2.0, repeat=3)
    parser.add_argument("--streams", type=int, default=8, help="streams at once for chunks/s")
    parser.add_argument("--chunks", type=int, default=100, help="chunks per stream")
    parser.add_argument(
        "--ttfc-streams", type=int, default=200, help="streams one at a time for first chunk"
    )
    parser.add_argument("--faces", nargs="+", choices=FACES, default=list(FACES))
    parser.add_argument("--servers", nargs="+", default=[s.name for s in SERVERS])
    args = parser.parse_args(argv)
    servers = [s for s in SERVERS if s.name in args.servers]
    for env in sorted({s.env for s in servers if s.env}):
        ensure_env(env)
    exit_on_sigterm()
    rows: list[dict[str, Any]] = []
    for round_ in range(args.repeat):
        progress(f"streaming: round {round_ + 1}/{args.repeat}")
        for server in servers:
            rows += [{**row, "round": round_} for row in run_server(server, args)]
    save_raw("streaming", {"args": vars(args), "runs": rows})
    publish("streaming", table(medians(rows), args), args)


if __name__ == "__main__":
    main()
