"""Scale: two workers against one, resident memory against MLServer's, and many
models in one server.

    python -m benchmarks.scale [--duration 5] [--repeat 3] [--no-doc]

- workers: ``mlserve serve --workers 2`` vs one process, the echo model, at 8 and
  64 connections (wrk shares the machine's cores with the servers);
- memory: resident set (VmRSS of the server's processes) once ready and after a
  load, for the echo model and for a TensorFlow SavedModel (the MLP of
  benchmarks/tf_batching.py), in mlserve and in MLServer 1.7.1;
- models: 1, 10 and 100 echo models in one server, wrk sending to each in turn.

Rounds alternate the cases; the tables show medians.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import http_load, tf_batching
from benchmarks.common import (
    arguments,
    exit_on_sigterm,
    heading,
    median_of,
    progress,
    publish,
    rss_mib,
    running,
    save_raw,
    table_lines,
    version,
    wrk,
)

ECHO_BODY = http_load.TENSOR.body
MLP_BODY = json.dumps(tf_batching.BODY).encode()

MODELS_FUNCTION = """
import mlserve
from benchmarks.servers.mlserve_model import Echo


def serving_function():
    fn = mlserve.new_function("bench")
    for index in range({count}):
        fn.add_model("echo" if index == 0 else f"echo-{{index}}", class_name=Echo, model_path=".")
    return fn
"""

Command = Callable[[int, Path], list[str]]


def mlserve_models(count: int, workers: int = 1) -> Command:
    """``mlserve serve`` of ``count`` echo models (``echo``, ``echo-1``, ...)."""

    def command(port: int, workdir: Path) -> list[str]:
        target = workdir / "models.py"
        target.write_text(MODELS_FUNCTION.format(count=count))
        argv = [sys.executable, "-m", "mlserve", "serve", str(target), "--port", str(port)]
        return [*argv, "--workers", str(workers)] if workers > 1 else argv

    return command


def model_paths(count: int) -> list[str]:
    return ["/v2/models/echo/infer"] + [f"/v2/models/echo-{i}/infer" for i in range(1, count)]


def load(
    port: int, body: bytes, connections: int, duration: float, paths: list[str]
) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}{paths[0]}"
    return wrk(url, body, connections, duration, paths=paths if len(paths) > 1 else None)


# ---- the three measures -------------------------------------------------------------


def workers_round(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for workers in (1, 2):
        with running(mlserve_models(1, workers), f"workers-{workers}") as (port, _pid, _):
            paths = model_paths(1)
            load(port, ECHO_BODY, 8, args.warmup, paths)
            for connections in (8, 64):
                result = load(port, ECHO_BODY, connections, args.duration, paths)
                progress(
                    f"scale workers={workers} c={connections:<3} {result['rps']:8.0f} req/s  "
                    f"p99 {result['p99_us'] / 1000:6.2f} ms"
                )
                rows.append({"workers": workers, "connections": connections, **result})
    return rows


def memory_cases() -> dict[str, tuple[Command, str, bytes, str]]:
    """name: (command, ready path, body, infer path)."""
    model = tf_batching.save_model()
    return {
        "mlserve, echo": (
            mlserve_models(1),
            "/v2/health/ready",
            ECHO_BODY,
            "/v2/models/echo/infer",
        ),
        "MLServer, echo": (
            http_load._mlserver,
            "/v2/health/ready",
            ECHO_BODY,
            "/v2/models/echo/infer",
        ),
        "mlserve, TF MLP": (
            tf_batching.mlserve_command(model, False),
            tf_batching.READY_PATH,
            MLP_BODY,
            tf_batching.INFER_PATH,
        ),
        "MLServer, TF MLP": (
            tf_batching.mlserver_command(model, False),
            tf_batching.READY_PATH,
            MLP_BODY,
            tf_batching.INFER_PATH,
        ),
    }


def memory_round(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name, (command, ready, body, path) in memory_cases().items():
        with running(command, "memory", ready) as (port, pid, _):
            idle = rss_mib(pid)
            load(port, body, 8, args.duration, [path])
            loaded = rss_mib(pid)
        progress(f"scale memory {name:18} ready {idle:7.1f} MiB  after load {loaded:7.1f} MiB")
        rows.append({"case": name, "idle_mib": idle, "loaded_mib": loaded})
    return rows


def models_round(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for count in args.models:
        with running(mlserve_models(count), f"models-{count}") as (port, pid, _):
            paths = model_paths(count)
            load(port, ECHO_BODY, 8, args.warmup, paths)
            result = load(port, ECHO_BODY, 8, args.duration, paths)
            result["rss_mib"] = rss_mib(pid)
        progress(
            f"scale models={count:<4} {result['rps']:8.0f} req/s  "
            f"p99 {result['p99_us'] / 1000:6.2f} ms  {result['rss_mib']:.0f} MiB"
        )
        rows.append({"models": count, **result})
    return rows


# ---- report -------------------------------------------------------------------------


def report(data: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    lines = heading(
        "Scale: workers, memory, model count",
        f"python -m benchmarks.scale --duration {args.duration:g} --repeat {args.repeat}",
        f"; MLServer {version('mlserver')}. Median of {args.repeat} alternating round(s), "
        f"{args.duration:g} s per point.",
    )
    by: dict[tuple[int, int], dict[str, float]] = {}
    cells = []
    for workers in (1, 2):
        for conns in (8, 64):
            rows = [
                r for r in data["workers"] if (r["workers"], r["connections"]) == (workers, conns)
            ]
            by[(workers, conns)] = stats = median_of(rows, "rps", "p99_us")
            cells.append([workers, conns, f"{stats['rps']:,.0f}", f"{stats['p99_us'] / 1000:.2f}"])
    lines += table_lines(["workers", "connections", "requests/s", "p99 ms"], cells, labels=0)
    for conns in (8, 64):
        lines.append(
            f"\n- two workers vs one at {conns} connections: "
            f"{by[(2, conns)]['rps'] / by[(1, conns)]['rps']:.2f}x"
        )
    cells = []
    for case in dict.fromkeys(r["case"] for r in data["memory"]):
        stats = median_of(
            [r for r in data["memory"] if r["case"] == case], "idle_mib", "loaded_mib"
        )
        cells.append([case, f"{stats['idle_mib']:.0f}", f"{stats['loaded_mib']:.0f}"])
    header = ["server, model", "RSS once ready (MiB)", "RSS after load (MiB)"]
    lines += ["", *table_lines(header, cells)]
    cells = []
    for count in args.models:
        rows = [r for r in data["models"] if r["models"] == count]
        stats = median_of(rows, "rps", "p99_us", "rss_mib")
        rps, p99, rss = stats["rps"], stats["p99_us"] / 1000, stats["rss_mib"]
        cells.append([count, f"{rps:,.0f}", f"{p99:.2f}", f"{rss:.0f}"])
    header = ["models in the server", "requests/s (8 connections, models in turn)", "p99 ms"]
    lines += ["", *table_lines([*header, "RSS MiB"], cells, labels=0)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0, warmup=2.0, repeat=3)
    parser.add_argument("--models", type=int, nargs="+", default=[1, 10, 100])
    args = parser.parse_args(argv)
    exit_on_sigterm()
    tf_batching.ensure_mlserver_tf()
    data: dict[str, list[dict[str, Any]]] = {"workers": [], "memory": [], "models": []}
    for number in range(args.repeat):
        progress(f"scale: round {number + 1}/{args.repeat}")
        data["workers"] += workers_round(args)
        data["memory"] += memory_round(args)
        data["models"] += models_round(args)
    save_raw("scale", data)
    publish("scale", report(data, args), args)


if __name__ == "__main__":
    main()
