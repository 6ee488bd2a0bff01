"""V2 gRPC load on loopback: mlserve against MLServer, KServe and a bare ``grpc.aio`` floor.

    python -m benchmarks.grpc_load [--duration 5] [--repeat 3] [--connections 1 8 64]
    python -m benchmarks.grpc_load --servers mlserve floor --no-doc

Each server serves the same echo model (a [1, 4] FP32 tensor in, the same out)
in one process, on its gRPC port with the settings it has by default.
``h2load`` (nghttp2) sends one pre-encoded ``ModelInferRequest`` (a gRPC message
frame: a zero compression flag, a 4-byte big-endian length, the protobuf) over
``C`` HTTP/2 connections, one stream each. gRPC errors come back as HTTP 200
with a ``grpc-status`` trailer h2load cannot read, so every server's answer is
checked once with a real client first (tritonclient for mlserve, a grpcio stub
for the others) and h2load's failed and non-2xx requests are counted. Every
server runs during the whole run, idle but for the point being measured; the
points alternate the servers, and the table gives the median of the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVS,
    HERE,
    ROOT,
    ab_lines,
    arguments,
    baseline_tree,
    command_line,
    cpu_seconds,
    ensure_env,
    exit_on_sigterm,
    free_port,
    from_tree,
    grouped,
    heading,
    median_of,
    progress,
    publish,
    running,
    save_raw,
    table_lines,
    version,
)
from benchmarks.http_load import LOAD_HEADER, load_rows, mlserver_start

MODEL = "echo"
VALUES = [1.0, 2.0, 3.0, 4.0]
INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


def _request(form: str) -> Any:
    """The ModelInferRequest of one form: ``typed`` (fp32_contents) or ``raw``."""
    from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb

    request = pb.ModelInferRequest(model_name=MODEL)
    tensor = request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    if form == "raw":
        request.raw_input_contents.append(struct.pack("<4f", *VALUES))
    else:
        tensor.contents.fp32_contents.extend(VALUES)
    return request


def grpc_frame(message: bytes) -> bytes:
    """One uncompressed gRPC message: flag 0, big-endian length, the bytes."""
    return b"\x00" + struct.pack(">I", len(message)) + message


@dataclass
class Server:
    """How to start one server, and the request forms measured on it."""

    name: str
    forms: tuple[str, ...]
    command: Callable[[int, Path], list[str]]
    env: str | None = None  # the peer environment, None for this interpreter


def _floor(port: int, workdir: Path) -> list[str]:
    return [sys.executable, str(HERE / "servers" / "grpc_floor.py"), str(port)]


def _mlserve(port: int, workdir: Path) -> list[str]:
    model = str(HERE / "servers" / "mlserve_model.py")
    http = ["--port", str(free_port())]
    return [sys.executable, "-m", "mlserve", "serve", model, *http, "--grpc-port", str(port)]


def _mlserver(port: int, workdir: Path) -> list[str]:
    return mlserver_start(workdir, http_port=free_port(), grpc_port=port)


def _kserve(port: int, workdir: Path) -> list[str]:
    script = str(HERE / "servers" / "kserve_model.py")
    python = str(ENVS / "kserve" / "bin" / "python")
    return [python, script, "--http_port", str(free_port()), "--grpc_port", str(port)]


def baseline(ref: str, workdir: Path) -> Server:
    """mlserve as of git ``ref``, measured in the same alternating rounds as the tree's
    own: the A/B of a change."""
    tree = baseline_tree(ref, workdir)
    return Server(
        f"mlserve@{ref}", ("typed", "raw"), lambda port, d: from_tree(tree, _mlserve(port, d))
    )


def servicer_ab(ref: str, tree: Path, rounds: int) -> list[str]:
    """In-process A/B of the servicer alone (benchmarks/servers/grpc_servicer_cpu.py):
    the baseline's and the tree's, alternated ``rounds`` times; table lines."""
    script = str(HERE / "servers" / "grpc_servicer_cpu.py")
    runs: dict[str, list[dict[str, float]]] = {ref: [], "mlserve": []}
    for round_ in range(rounds):
        for name, path in ((ref, tree), ("mlserve", ROOT)):
            env = {**os.environ, "PYTHONPATH": str(path)}
            done = subprocess.run(
                [sys.executable, script], env=env, capture_output=True, text=True, check=True
            )
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            progress(f"grpc in-process {name:16} round {round_ + 1}: {runs[name][-1]}")
    cells = []
    for form in ("typed", "raw"):
        before, after = (median_of(runs[name], form)[form] for name in (ref, "mlserve"))
        cells.append([form, f"{before:.0f}", f"{after:.0f}", f"{after / before - 1:+.0%}"])
    return [
        "",
        f"In-process, the servicer alone (`benchmarks/servers/grpc_servicer_cpu.py`: 8 clients "
        f"on one loop, no sockets), process CPU us per ModelInfer, median of {rounds} "
        "alternating runs:",
        "",
        *table_lines(["request", f"mlserve@{ref}", "mlserve", "change"], cells),
    ]


SERVERS = [
    Server("floor", ("typed",), _floor),
    Server("mlserve", ("typed", "raw"), _mlserve),
    Server("MLServer", ("typed",), _mlserver, env="mlserver"),
    Server("KServe", ("typed",), _kserve, env="kserve"),
]


def _stub_infer(port: int, form: str, timeout: float = 10) -> list[float]:
    """One ModelInfer through a grpcio stub; the output's values."""
    import grpc

    from mlserve.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            _request(form), timeout=timeout
        )
    if answer.raw_output_contents:
        return list(struct.unpack("<4f", answer.raw_output_contents[0]))
    return list(answer.outputs[0].contents.fp32_contents)


def _answers(port: int) -> bool:
    """Ready: a ModelInfer succeeds (the model is loaded, whatever the server's own probes say)."""
    import grpc

    try:
        _stub_infer(port, "typed", timeout=2)
    except grpc.RpcError:
        return False
    return True


_TRITON = """
import sys
import numpy as np
import tritonclient.grpc as triton
client = triton.InferenceServerClient("127.0.0.1:" + sys.argv[1])
tensor = triton.InferInput("input-0", [1, 4], "FP32")
tensor.set_data_from_numpy(np.array([VALUES], dtype=np.float32))
print(client.infer("MODEL", [tensor]).as_numpy("output-0").ravel().tolist())
""".replace("VALUES", repr(VALUES)).replace("MODEL", MODEL)


def _triton_infer(port: int) -> list[float]:
    """mlserve through tritonclient.grpc, as its users call it (raw in, raw out). In a
    process of its own: its stubs and mlserve's both define the ``inference`` package."""
    argv = [sys.executable, "-c", _TRITON, str(port)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60)
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def check_answer(server: Server, port: int, form: str) -> None:
    """The server echoes the tensor to real clients (a gRPC error would be a 200 to h2load):
    a grpcio stub sending the form, and tritonclient too for mlserve."""
    for client, values in [("grpcio", _stub_infer(port, form))] + (
        [("tritonclient", _triton_infer(port))] if server.name.startswith("mlserve") else []
    ):
        if values != VALUES:
            raise RuntimeError(f"{server.name} answered {values} to {client}'s {form} request")


def h2load(
    port: int, body: Path, connections: int, duration: float, path: str = INFER_PATH
) -> dict[str, Any]:
    """``h2load`` against ModelInfer (or the gRPC method at ``path``): requests/s,
    latency percentiles (us), failures."""
    if shutil.which("h2load") is None:
        raise SystemExit("h2load is not installed: run `make system-deps` (nghttp2-client)")
    with tempfile.NamedTemporaryFile(prefix="bench-h2load-", suffix=".log") as log:
        argv = ["h2load", "-D", f"{duration:g}", "-c", str(connections), "-m", "1"]
        argv += ["-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers"]
        argv += [f"--log-file={log.name}", f"http://127.0.0.1:{port}{path}"]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        lines = Path(log.name).read_text().splitlines()
    latencies = sorted(int(line.split("\t")[2]) for line in lines if line.count("\t") == 2)
    return {**_summary(out, duration), **_percentiles(latencies)}


def _summary(out: str, duration: float) -> dict[str, Any]:
    """h2load's counts: requests done, succeeded, failed or errored, non-2xx statuses."""
    counts: dict[str, int] = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("requests:"):
            for part in line.removeprefix("requests:").split(","):
                number, label = part.split()[:2]
                counts[label] = int(number)
        elif line.startswith("status codes:"):
            parts = [p.split() for p in line.removeprefix("status codes:").split(",")]
            counts["non_2xx"] = sum(int(n) for n, label in parts if label != "2xx")
    if "succeeded" not in counts:
        raise RuntimeError(f"h2load printed no summary:\n{out[-2000:]}")
    bad = counts["failed"] + counts["errored"] + counts["timeout"] + counts.get("non_2xx", 0)
    return {
        "requests": counts["succeeded"],
        "rps": counts["succeeded"] / duration,
        "bad": bad,
    }


def _percentiles(latencies: list[int]) -> dict[str, float]:
    if not latencies:
        return {"p50_us": 0.0, "p99_us": 0.0}
    pick = lambda q: float(latencies[min(len(latencies) - 1, int(q * len(latencies)))])  # noqa: E731
    return {"p50_us": pick(0.50), "p99_us": pick(0.99)}


def measure(
    server: Server, port: int, pid: int, form: str, body: Path, connections: int, duration: float
) -> dict[str, Any]:
    cpu = cpu_seconds(pid)
    result = h2load(port, body, connections, duration)
    result["cpu_us"] = (cpu_seconds(pid) - cpu) / max(result["requests"], 1) * 1e6
    progress(
        f"grpc {server.name:8} {form:5} c={connections:<3} {result['rps']:8.0f} req/s"
        f"  p50 {result['p50_us'] / 1e3:5.2f} ms  p99 {result['p99_us'] / 1e3:6.2f} ms"
        f"  CPU {result['cpu_us']:5.0f} us/req"
        + (f"  FAILED {result['bad']}" if result["bad"] else "")
    )
    return {"server": server.name, "form": form, "connections": connections, **result}


def run(servers: list[Server], args: argparse.Namespace, workdir: Path) -> list[dict[str, Any]]:
    """Start every server, check it, then alternate the points over ``args.repeat`` rounds."""
    bodies = {}
    for form in ("typed", "raw"):
        bodies[form] = workdir / f"{form}.bin"
        bodies[form].write_bytes(grpc_frame(_request(form).SerializeToString()))
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        started = []
        for server in servers:
            progress(f"grpc: starting {server.name}")
            port, pid, _ = stack.enter_context(running(server.command, server.name, ready=_answers))
            for form in server.forms:
                check_answer(server, port, form)
                h2load(port, bodies[form], 8, args.warmup)
            started.append((server, port, pid))
        for round_ in range(args.repeat):
            progress(f"grpc: round {round_ + 1}/{args.repeat}")
            for connections in args.connections:
                for server, port, pid in started:
                    for form in server.forms:
                        row = measure(
                            server, port, pid, form, bodies[form], connections, args.duration
                        )
                        rows.append({**row, "round": round_})
    return rows


Stats = dict[tuple[str, str, int], dict[str, float]]


_KEYS = ("rps", "p50_us", "p99_us", "cpu_us")


def medians(rows: list[dict[str, Any]]) -> Stats:
    """Per (server, form, connections): the median over the rounds; by connections,
    then in the order measured."""
    groups = grouped(rows, "server", "form", "connections")
    order = sorted(groups, key=lambda key: (key[2], list(groups).index(key)))
    return {key: {**median_of(groups[key], *_KEYS), "bad": _failed(groups[key])} for key in order}


def _failed(group: list[dict[str, Any]]) -> float:
    """Failed requests (h2load's failed, errored, timed out, non-2xx) over every round."""
    return float(sum(row["bad"] for row in group))


def table(stats: Stats, args: argparse.Namespace, inproc: list[str]) -> str:
    peers = f"MLServer {version('mlserver')}, KServe {version('kserve')}"
    grpcio = version(None, "grpcio")
    lines = heading(
        "gRPC: mlserve, MLServer, KServe and a bare grpc.aio floor",
        command_line(
            "grpc_load",
            args,
            {
                "connections": [1, 8, 64],
                "servers": [s.name for s in SERVERS],
                "baseline": None,
                "inproc": False,
            },
        ),
        f"; {peers}; grpcio {grpcio} (mlserve and the floor); h2load, one stream per "
        f"connection, {args.duration:g} s per point after a {args.warmup:g} s warm-up, median "
        f"of {args.repeat} alternating round(s). V2 ModelInfer of a [1, 4] FP32 tensor: `typed` "
        "in `fp32_contents`, `raw` in `raw_input_contents` (tritonclient's form; the answer "
        "comes back raw too).",
    )
    header = ["server", "request", *LOAD_HEADER[2:], "server CPU us/request"]
    failed = [f"{s['bad']:.0f}" for s in stats.values()]
    rows = [[*row, bad] for row, bad in zip(load_rows(stats), failed, strict=True)]
    lines += table_lines([*header, "failed (all rounds)"], rows, labels=2)
    ratios = []
    for conns in args.connections:
        ours = stats.get(("mlserve", "typed", conns))
        others = {n: stats.get((n, "typed", conns)) for n in ("MLServer", "KServe", "floor")}
        cells = [
            f"{ours['rps'] / p['rps']:.2f}{'' if name == 'floor' else 'x'}"
            if ours and p and p["rps"]
            else "-"
            for name, p in others.items()
        ]
        floor = others["floor"]
        cpu = f"{ours['cpu_us']:.0f} vs {floor['cpu_us']:.0f}" if ours and floor else "-"
        ratios.append([conns, *cells, cpu])
    header = ["connections", "mlserve/MLServer req/s", "mlserve/KServe req/s"]
    header += ["mlserve/floor req/s", "CPU us/request mlserve vs floor"]
    lines += ["", *table_lines(header, ratios, labels=0)]
    return "\n".join([*lines, *ab_lines(stats, args.baseline), *inproc, "", goals(stats)])


def goals(stats: Stats) -> str:
    ours, peer, floor = (stats.get((n, "typed", 8)) for n in ("mlserve", "MLServer", "floor"))
    if not (ours and peer and floor):
        return "Goals not evaluated: 8 connections was not measured for every server."
    speed, share = ours["rps"] / peer["rps"], ours["rps"] / floor["rps"]
    return "\n".join(
        [
            "Goals, typed request at 8 connections:",
            "",
            f"- at least 2x MLServer's requests/s: {speed:.2f}x, "
            + ("met" if speed >= 2 else "not met"),
            f"- at least 0.75 of the bare grpc.aio floor: {share:.2f}, "
            + ("met" if share >= 0.75 else "not met"),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0, warmup=2.0, repeat=3)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--servers", nargs="+", default=[s.name for s in SERVERS])
    parser.add_argument(
        "--baseline", metavar="GIT_REF", help="also measure mlserve as of this commit (A/B)"
    )
    parser.add_argument(
        "--inproc", action="store_true", help="with --baseline: the servicer's in-process A/B too"
    )
    args = parser.parse_args(argv)
    if args.inproc and not args.baseline:
        parser.error("--inproc compares with --baseline GIT_REF")
    servers = [s for s in SERVERS if s.name in args.servers]
    for env in sorted({s.env for s in servers if s.env}):
        ensure_env(env)
    exit_on_sigterm()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="bench-grpc-") as tmp:
        inproc: list[str] = []
        if args.baseline:
            servers.insert(0, baseline(args.baseline, Path(tmp)))
            if args.inproc:
                inproc = servicer_ab(args.baseline, Path(tmp) / "baseline", args.repeat)
        rows = run(servers, args, Path(tmp))
    save_raw("grpc", {"args": vars(args), "runs": rows, "inproc": inproc})
    publish("grpc", table(medians(rows), args, inproc), args)


if __name__ == "__main__":
    main()
