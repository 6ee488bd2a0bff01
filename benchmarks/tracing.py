"""The cost of tracing: requests/s at 8 connections with tracing off and on, beside the
baseline (mlserve as it was before tracing).

    python -m benchmarks.tracing [--duration 5] [--warmup 1] [--repeat 3] [--baseline REF]
    python -m benchmarks.tracing --no-doc

One echo model (``benchmarks/servers/mlserve_model.py``, a [1, 4] FP32 tensor in and
out) served by ``mlserve serve``, driven by ``wrk`` at 8 connections, three ways:

- ``baseline``: mlserve's package as of ``--baseline`` (default: the commit before
  ``mlserve/core/tracing.py`` was added; HEAD while it is not committed yet);
- ``off``: this tree, no endpoint (tracing is not imported: the hot path reads one
  module attribute);
- ``on``: this tree with ``--otel-endpoint`` to an OTLP/HTTP receiver in this process
  (``tests/otlp_receiver.py`` counting: it decodes every export and counts its spans, as a
  collector's receiver would, without keeping them) and ``OTEL_TRACES_SAMPLER=always_on``:
  every request is traced and exported;
- ``on 10%``: the same with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` at 0.1, one
  request in ten traced (what a busy service would run).

Rounds alternate the cases; the table gives medians, the server's CPU time per request
(steadier than requests/s on a shared machine) and, for ``on``, the spans the receiver
got per request. Goals: off within 1 % of the baseline, on at most 10 % below off.

Clocks swing with the machine's load; instructions do not. Unless valgrind is missing or
``--no-count`` is given, the section also counts the instructions of one request of
``python -m benchmarks.instructions --case http`` (the HTTP protocol fed in-process) with
the baseline's package and this tree's, tracing off: the 1 % goal, measured exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    HERE,
    ROOT,
    arguments,
    baseline_tree,
    cpu_seconds,
    exit_on_sigterm,
    from_tree,
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

CONNECTIONS = 8
CASES = ["baseline", "off", "on", "on 10%"]
SAMPLERS = {"on": "always_on", "on 10%": "parentbased_traceidratio"}
OFF_GOAL = 0.99  # off keeps at least 99 % of the baseline's requests/s
ON_GOAL = 0.90  # on keeps at least 90 % of off's
PATH = "/v2/models/echo/infer"
BODY = json.dumps(
    {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
).encode()


def before_tracing() -> str:
    """The commit before the one that added mlserve/core/tracing.py, or HEAD if none did."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "-1", "--", "mlserve/core/tracing.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return f"{added}^" if added else "HEAD"


def serve(case: str, tree: Path | None, endpoint: str) -> Callable[[int, Path], list[str]]:
    """The command that serves the echo model for ``case``."""

    def command(port: int, workdir: Path) -> list[str]:
        model = str(HERE / "servers" / "mlserve_model.py")
        argv = [sys.executable, "-m", "mlserve", "serve", model, "--port", str(port)]
        if case == "baseline" and tree is not None:
            return from_tree(tree, argv)
        if case in SAMPLERS:
            sampler = [f"OTEL_TRACES_SAMPLER={SAMPLERS[case]}", "OTEL_TRACES_SAMPLER_ARG=0.1"]
            return ["env", *sampler, *argv, "--otel-endpoint", endpoint]
        return argv

    return command


def measure(
    case: str, tree: Path | None, receiver: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """One point: wrk at 8 connections after a warm-up; requests/s, CPU and spans per request."""
    with running(serve(case, tree, receiver.endpoint), f"tracing-{case}") as (port, pid, _):
        url = f"http://127.0.0.1:{port}{PATH}"
        wrk(url, BODY, CONNECTIONS, args.warmup)
        cpu, spans = cpu_seconds(pid), receiver.count
        result = wrk(url, BODY, CONNECTIONS, args.duration)
        result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
    if sum(result["errors"].values()):
        raise RuntimeError(f"wrk counted errors ({case}): {result['errors']}")
    result["spans"] = (receiver.count - spans) / result["requests"]  # what reached it
    progress(
        f"tracing {case:8} {result['rps']:8.0f} req/s {result['cpu_us']:6.1f} us CPU/request"
        + (f"  {result['spans']:.2f} spans/request received" if case in SAMPLERS else "")
    )
    return {"case": case, **result}


def instructions(tree: Path | None, requests: int) -> float:
    """Instructions of one HTTP request (``benchmarks.instructions``' http case) with the
    package of ``tree`` (None: this tree's), by two callgrind counts."""
    path = f"{tree}{os.pathsep}{ROOT}" if tree else str(ROOT)
    env = {**os.environ, "PYTHONPATH": path}

    def count(calls: int) -> int:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        command += [sys.executable, "-P", "-m", "benchmarks.instructions", "--run-http"]
        done = subprocess.run(
            [*command, str(calls)], capture_output=True, text=True, check=True, env=env
        )
        return int(re.findall(r"Collected : (\d+)", done.stderr)[-1])

    return (count(200 + requests) - count(200)) / requests


def table(
    stats: dict[str, dict[str, float]],
    args: argparse.Namespace,
    ref: str,
    counts: dict[str, float] | None = None,
) -> str:
    lines = heading(
        "Tracing: off and on against the baseline",
        f"python -m benchmarks.tracing --duration {args.duration:g} --repeat {args.repeat}",
        f"; baseline: mlserve as of `{ref}` (before tracing). {args.duration:g} s per point "
        f"after a {args.warmup:g} s warm-up, median of {args.repeat} alternating rounds; wrk "
        f"at {CONNECTIONS} connections on the echo model ([1, 4] FP32, V2 JSON). On: "
        "`--otel-endpoint` to an OTLP/HTTP receiver in the benchmark's process (it decodes "
        "and counts every export, on the same 2 cores), `OTEL_TRACES_SAMPLER=always_on`; "
        "on 10%: "
        "`parentbased_traceidratio` at 0.1. CPU: the "
        "server process, all its threads (the exporter's included).",
    )
    rows = []
    for case in CASES:
        if case not in stats:
            continue
        s = stats[case]
        against = {"off": "baseline", "on": "off", "on 10%": "off"}.get(case)
        ratio = f"{s['rps'] / stats[against]['rps']:.3f}" if against in stats else "-"
        spans = f"{s['spans']:.2f}" if case in SAMPLERS else "-"
        rows.append([case, f"{s['rps']:,.0f}", ratio, f"{s['cpu_us']:.1f}", spans])
    header = ["tracing", "requests/s", "vs the case before", "server CPU us/request"]
    lines += table_lines([*header, "spans received/request"], rows)
    return "\n".join([*lines, "", *counted_lines(counts, ref), goals(stats, counts)])


def counted_lines(counts: dict[str, float] | None, ref: str) -> list[str]:
    if not counts:
        return []
    extra = counts["off"] / counts["baseline"] - 1
    return [
        "Counted, not timed (`python -m benchmarks.instructions --case http`: the HTTP "
        f"protocol fed the echo request in-process, 8 clients): {counts['baseline'] / 1e3:,.1f}k "
        f"instructions per request with mlserve as of `{ref}`, {counts['off'] / 1e3:,.1f}k "
        f"with this tree and tracing off: {extra:+.2%}.",
        "",
    ]


def goals(stats: dict[str, dict[str, float]], counts: dict[str, float] | None = None) -> str:
    lines = ["Goals:", ""]
    if counts:
        ratio = counts["off"] / counts["baseline"]
        met = "met" if ratio <= 2 - OFF_GOAL else "not met"
        words = "off within 1 % of the baseline, instructions per request off/baseline"
        lines.append(f"- {words}: {ratio:.4f}, {met}")
    for case, against, goal, words in (
        ("off", "baseline", OFF_GOAL, "off within 1 % of the baseline, requests/s off/baseline"),
        ("on", "off", ON_GOAL, "on at most 10 % below off, requests/s on/off"),
    ):
        now, before = stats.get(case), stats.get(against)
        if not (now and before):
            lines.append(f"- {words}: not evaluated ({case} and {against} not both measured)")
            continue
        ratio, cpu = now["rps"] / before["rps"], now["cpu_us"] - before["cpu_us"]
        met = "met" if ratio >= goal else "not met"
        lines.append(f"- {words}: {ratio:.3f}, {met} ({cpu:+.1f} us server CPU per request)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, None, duration=5.0, warmup=1.0, repeat=3)
    parser.add_argument("--baseline", help="git ref of the baseline (default: before tracing)")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=CASES)
    parser.add_argument("--no-count", action="store_true", help="no callgrind instruction count")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    from tests.otlp_receiver import HttpReceiver

    ref = args.baseline or before_tracing()
    receiver = HttpReceiver(counting=True)
    rows: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp:
            tree = baseline_tree(ref, Path(tmp)) if "baseline" in args.cases else None
            for round_ in range(args.repeat):
                progress(f"tracing: round {round_ + 1}/{args.repeat}")
                for case in args.cases:
                    rows.append({**measure(case, tree, receiver, args), "round": round_})
            counts = None
            if not args.no_count and shutil.which("valgrind") and tree is not None:
                progress("tracing: instructions per request, baseline and off (callgrind)")
                counts = {"baseline": instructions(tree, 1000), "off": instructions(None, 1000)}
    finally:
        receiver.stop()
    stats = {
        case: median_of(group, "rps", "cpu_us", "spans")
        for (case,), group in grouped(rows, "case").items()
    }
    save_raw("tracing", {"args": vars(args), "baseline": ref, "runs": rows, "counts": counts})
    publish("tracing", table(stats, args, ref, counts), args)


if __name__ == "__main__":
    main()
