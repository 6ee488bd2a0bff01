"""Rolling out a model: what a weighted router and a shadow route cost the caller.

    python -m benchmarks.rollout [--duration 5] [--repeat 3] [--connections 8]
                                 [--rate 500] [--shadow-rounds 8]

One echo model (a [1, 4] FP32 tensor in, the same out) served four ways, one process
each, alternating in rounds while ``wrk`` drives them: a plain route; two weighted
versions of the same name (90/10, drawn at random); the same with a routing key in a
header (sticky: rendezvous hashing per request); the plain route with a shadow that
gets a copy of every request. The table gives the median of the rounds; the goal
compares the weighted router's cost per request with the plain one's. A second table
times the same cases in process (the mock server, no network): the router's own cost,
which a loaded machine blurs least (the fastest of interleaved batches of calls).

The shadow's effect on the primary is measured apart, on a shared machine whose own
load swings from second to second: the plain server and the shadowed one run side by
side, and paced loads (``--rate`` requests/s, well below what either can take: a
saturating load measures the shadow's CPU, not its effect on a caller's wait) go to
one, then the other, for ``--shadow-rounds`` pairs of rounds; each number is the median
over the rounds. Beside the client's latencies (wrk's, which the machine's load blurs),
each round reads the primary's own latency histogram from the server's ``/metrics``
(``mlserve_model_latency_seconds`` of ``echo``), which no client noise reaches.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.request import urlopen

from benchmarks.common import (
    HERE,
    arguments,
    command_line,
    cpu_seconds,
    exit_on_sigterm,
    grouped,
    heading,
    median_of,
    progress,
    publish,
    running,
    save_raw,
    table_lines,
    wrk,
)
from benchmarks.http_load import TENSOR, check_answer

INFER_PATH = "/v2/models/echo/infer"


@dataclass(frozen=True)
class Case:
    """One way to serve the echo model, and the headers its requests carry."""

    name: str
    served: str  # ROLLOUT_CASE of benchmarks/servers/rollout_model.py
    headers: tuple[tuple[str, str], ...] = ()

    def command(self, port: int, workdir: Path) -> list[str]:
        model = str(HERE / "servers" / "rollout_model.py")
        serve = [sys.executable, "-m", "mlserve", "serve", model, "--port", str(port)]
        return ["env", f"ROLLOUT_CASE={self.served}", *serve]


CASES = [
    Case("plain", "plain"),
    Case("weighted 90/10", "weighted"),
    Case("weighted, sticky key", "weighted", (("x-mlserve-route-key", "user-42"),)),
    Case("plain + shadow", "shadow"),  # its shadow: an echo as costly as the primary
]


PACED = HERE / "wrk" / "paced.lua"


def paced(url: str, rate: int, seconds: float) -> dict[str, Any]:
    """wrk posting the tensor body at ``rate`` requests/s for ``seconds``."""
    with tempfile.NamedTemporaryFile("wb", prefix="bench-rollout-", suffix=".jsonl") as bodies:
        bodies.write(TENSOR.body + b"\n")
        bodies.flush()
        threads = 2
        connections = max(threads, rate // 250)
        argv = ["wrk", "-t", str(threads), "-c", str(connections)]
        argv += ["-d", f"{max(1, round(seconds))}s", "--timeout", "10s", "-s", str(PACED), url]
        env = {**os.environ, "BENCH_BODIES": bodies.name, "BENCH_RATE": str(rate)}
        env["BENCH_THREADS"] = str(threads)
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def measure(case: Case, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with running(case.command, case.name) as (port, pid, _):
        url = f"http://127.0.0.1:{port}{INFER_PATH}"
        check_answer(url, TENSOR)
        headers = dict(case.headers)
        body, kind = TENSOR.body, TENSOR.content_type
        wrk(url, body, 8, args.warmup, kind, headers)
        for connections in args.connections:
            cpu = cpu_seconds(pid)
            result = wrk(url, body, connections, args.duration, kind, headers)
            result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
            bad = sum(result["errors"].values())
            progress(
                f"rollout {case.name:22} c={connections:<3} {result['rps']:8.0f} req/s"
                f"  p50 {result['p50_us'] / 1e3:5.2f} ms  p99 {result['p99_us'] / 1e3:6.2f} ms"
                f"  cpu {result['cpu_us']:5.0f} us"
                + (f"  ERRORS {result['errors']}" if bad else "")
            )
            rows.append({"case": case.name, "load": f"{connections} connections", **result})
    return rows


SHADOWED = (CASES[0], CASES[3])  # plain, plain + shadow: the pair the shadow rounds compare
_BUCKET = re.compile(
    r'^mlserve_model_latency_seconds_bucket\{(?=[^}]*model="echo")(?=[^}]*operation="infer")'
    r'[^}]*le="([^"]+)"[^}]*\} (\S+)$'
)
_SUM = re.compile(
    r'^mlserve_model_latency_seconds_sum\{(?=[^}]*model="echo")(?=[^}]*operation="infer")'
    r"[^}]*\} (\S+)$"
)


def primary_histogram(port: int) -> tuple[list[tuple[float, float]], float]:
    """The primary's (``echo``) latency histogram in ``/metrics``: cumulative buckets
    ``(upper bound s, count)`` and the sum of seconds."""
    with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    buckets: list[tuple[float, float]] = []
    total = 0.0
    for line in text.splitlines():
        if bucket := _BUCKET.match(line):
            buckets.append((float(bucket[1]), float(bucket[2])))
        elif summed := _SUM.match(line):
            total = float(summed[1])
    return sorted(buckets), total


def server_side(
    before: tuple[list[tuple[float, float]], float], after: tuple[list[tuple[float, float]], float]
) -> dict[str, float]:
    """The calls between two readings of the histogram: their mean, and the upper bound of
    the bucket that holds their 99th percentile (the buckets are coarse: 0.5, 1, 2.5 ms...)."""
    start = dict(before[0])
    counts = [(bound, n - start.get(bound, 0.0)) for bound, n in after[0]]
    calls = counts[-1][1] if counts else 0.0
    if not calls:
        return {"server_mean_us": float("nan"), "server_p99_le_us": float("nan")}
    p99 = next(bound for bound, n in counts if n >= 0.99 * calls)
    return {"server_mean_us": (after[1] - before[1]) / calls * 1e6, "server_p99_le_us": p99 * 1e6}


def shadow_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Paced loads to the plain server, then the shadowed one, ``args.shadow_rounds`` times,
    both servers up all along (no start in between)."""
    rows: list[dict[str, Any]] = []
    plain, shadowed = SHADOWED
    with (
        running(plain.command, plain.name) as (plain_port, _, _),
        running(shadowed.command, shadowed.name) as (shadowed_port, _, _),
    ):
        ports = {plain.name: plain_port, shadowed.name: shadowed_port}
        for port in ports.values():
            url = f"http://127.0.0.1:{port}{INFER_PATH}"
            check_answer(url, TENSOR)
            paced(url, args.rate, args.warmup)
        for round_ in range(args.shadow_rounds):
            for name, port in ports.items():
                url = f"http://127.0.0.1:{port}{INFER_PATH}"
                before = primary_histogram(port)
                result = paced(url, args.rate, args.duration)
                result.update(server_side(before, primary_histogram(port)))
                progress(
                    f"rollout shadow round {round_ + 1}/{args.shadow_rounds} {name:15}"
                    f" {args.rate}/s  p50 {result['p50_us'] / 1e3:5.2f} ms"
                    f"  p99 {result['p99_us'] / 1e3:6.2f} ms"
                    f"  server mean {result['server_mean_us']:5.1f} us"
                )
                rows.append({"case": name, "load": f"{args.rate:,} req/s", **result})
    return rows


Stats = dict[tuple[str, str], dict[str, float]]


def medians(rows: list[dict[str, Any]], *keys: str) -> Stats:
    groups = grouped(rows, "case", "load")
    return {key: median_of(group, *keys) for key, group in groups.items()}


def in_process(calls: int, batches: int) -> dict[str, float]:
    """CPU microseconds per call through the mock server, per case: the fastest batch."""
    from benchmarks.servers import rollout_model

    servers = {}
    for case in CASES:
        os.environ["ROLLOUT_CASE"] = case.served
        servers[case.name] = (rollout_model.serving_function().to_mock_server(), case)
    body = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
    best = dict.fromkeys(servers, float("inf"))
    for _ in range(batches):
        for name, (server, case) in servers.items():
            headers = dict(case.headers)
            started = time.process_time()  # this process's CPU: others' load blurs it least
            for _ in range(calls):
                server.test(INFER_PATH, body, headers=headers)
            best[name] = min(best[name], (time.process_time() - started) / calls * 1e6)
    for server, _ in servers.values():
        server.wait_for_completion()
    return best


def table(stats: Stats, shadow: Stats, args: argparse.Namespace, local: dict[str, float]) -> str:
    defaults = {"connections": [8], "rate": 500, "calls": 5_000, "batches": 15}
    lines = heading(
        "Rolling out a model: weighted routes and shadows",
        command_line("rollout", args, {**defaults, "shadow_rounds": 8}),
        f"; {args.duration:g} s per point after a {args.warmup:g} s warm-up, median of "
        f"{args.repeat} alternating round(s); one server process per case, the V2 JSON "
        "tensor body. On a shared machine a p99 swings from round to round with the "
        "machine's own load (each round's numbers are in benchmarks/results/); the router's "
        "own cost is read from the in-process table, which that load blurs least.",
    )
    header = ["case", "load", "requests/s", "p50 ms", "p99 ms", "server CPU us/request"]
    rows = [
        [name, load, f"{s['rps']:,.0f}", f"{s['p50_us'] / 1000:.2f}"]
        + [f"{s['p99_us'] / 1000:.2f}", f"{s['cpu_us']:.0f}"]
        for (name, load), s in stats.items()
    ]
    lines += table_lines(header, rows, labels=2)
    plain = local["plain"]
    lines += [
        "",
        f"In process (the mock server), CPU time per call, the fastest of {args.batches} "
        f"batches of {args.calls:,} calls (a shadow's thread counts too):",
        "",
    ]
    lines += table_lines(
        ["case", "CPU us/call", "vs plain"],
        [[name, f"{us:.1f}", f"{us / plain - 1:+.1%}"] for name, us in local.items()],
    )
    lines += [
        "",
        f"The shadow's effect on the primary: {args.rate:,} requests/s paced to the plain "
        "server and to the shadowed one in turn, both up all along, "
        f"{args.shadow_rounds} pairs of {args.duration:g} s rounds, medians over the rounds; "
        "the server's own numbers from the primary's `mlserve_model_latency_seconds` "
        "histogram (its p99 as the bucket that holds it):",
        "",
    ]
    lines += table_lines(
        ["case", "client p50 ms", "client p99 ms", "server mean us", "server p99 within"],
        [
            [name, f"{s['p50_us'] / 1000:.2f}", f"{s['p99_us'] / 1000:.2f}"]
            + [f"{s['server_mean_us']:.1f}", f"{s['server_p99_le_us'] / 1000:g} ms"]
            for (name, _), s in shadow.items()
        ],
    )
    return "\n".join([*lines, "", goals(stats, shadow, local, args.rate)])


def goals(stats: Stats, shadow_stats: Stats, local: dict[str, float], rate: int) -> str:
    plain, weighted, sticky = (stats.get((c.name, "8 connections")) for c in CASES[:3])
    paced_plain, shadow = (shadow_stats.get((c.name, f"{rate:,} req/s")) for c in SHADOWED)
    if not (plain and weighted and sticky and paced_plain and shadow):
        return "Goals not evaluated: a case was not measured at 8 connections and paced."
    lines = ["Goals (the router's cost: its in-process CPU per call over the plain server's", ""]
    lines[0] += " CPU per HTTP request at 8 connections; the load's own numbers beside it):"
    for case, measured in (("weighted 90/10", weighted), ("weighted, sticky key", sticky)):
        router = local[case] - local["plain"]
        share = router / plain["cpu_us"]
        lines.append(
            f"- a {case} router costs at most 5% more per request than a plain one: "
            f"{router:+.1f} us of {plain['cpu_us']:.0f} us, {share:+.1%}, "
            + ("met" if share <= 0.05 else "not met")
            + f" (under load {measured['cpu_us'] / plain['cpu_us'] - 1:+.0%} server CPU, "
            f"{plain['rps'] / measured['rps'] - 1:+.0%} time per request)"
        )
    p99 = shadow["p99_us"] / paced_plain["p99_us"] - 1
    mean = shadow["server_mean_us"] / paced_plain["server_mean_us"] - 1
    same_bucket = shadow["server_p99_le_us"] <= paced_plain["server_p99_le_us"]
    lines.append(
        f"- a shadow route leaves the primary's p99 as it was (within 10%) at {rate:,} req/s: "
        f"client {shadow['p99_us'] / 1000:.2f} ms vs {paced_plain['p99_us'] / 1000:.2f} ms "
        f"({p99:+.0%}), "
        + ("met" if p99 <= 0.10 else "not met")
        + f" (server side, the primary's own calls, mean {shadow['server_mean_us']:.1f} us vs "
        f"{paced_plain['server_mean_us']:.1f} us ({mean:+.0%}), p99 "
        + ("in the same bucket or a lower one" if same_bucket else "a bucket higher")
        + ")"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0, warmup=2.0, repeat=3)
    parser.add_argument("--connections", type=int, nargs="+", default=[8])
    parser.add_argument("--rate", type=int, default=500, help="the paced load, requests/s")
    parser.add_argument(
        "--shadow-rounds", type=int, default=8, help="pairs of paced rounds, plain and shadowed"
    )
    parser.add_argument("--calls", type=int, default=5_000, help="calls per in-process batch")
    parser.add_argument("--batches", type=int, default=15, help="in-process batches per case")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    rows: list[dict[str, Any]] = []
    for round_ in range(args.repeat):
        progress(f"rollout: round {round_ + 1}/{args.repeat}")
        for case in CASES:
            rows += [{**row, "round": round_} for row in measure(case, args)]
    shadow = shadow_rounds(args)
    local = in_process(args.calls, args.batches)
    raw = {"args": vars(args), "runs": rows, "shadow_runs": shadow, "in_process_us": local}
    save_raw("rollout", raw)
    stats = medians(rows, "rps", "p50_us", "p99_us", "cpu_us")
    shadow_stats = medians(shadow, "p50_us", "p99_us", "server_mean_us", "server_p99_le_us")
    publish("rollout", table(stats, shadow_stats, args, local), args)


if __name__ == "__main__":
    main()
