"""The web console's cost to serving: inference with the console off, on with nobody
watching, and open in pages that refresh.

    python -m benchmarks.console [--duration 10] [--repeat 5] [--pages 3]
    python -m benchmarks.console --no-doc

``mlserve serve examples/serving.py`` under wrk at 8 connections on the flowers model's
V2 infer, in alternating rounds of three cases: ``--no-console``; the console on (its
history sampler runs every 5 s) with nobody watching; the console on with ``--pages``
pages open, each polling as mlserve/console/models.js does: ``/console/api/history``
and ``/console/api/overview`` together, then the next tick 5 s after both answered.
The pages are threads of this process, opened together as the timed run starts (their
calls all at once: the worst case) and closed as it ends.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
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
)
from benchmarks.common import wrk as wrk_load

GOAL = 0.95  # requests/s with the console open, of the console off
CONNECTIONS = 8
EXAMPLE = ROOT / "examples" / "serving.py"
INFER = "/v2/models/flowers/infer"
BODY = json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]]}).encode()
POLLED = ("/console/api/history", "/console/api/overview")  # what each tick of a page reads
EVERY = 5.0  # seconds between a page's ticks (models.js: ``every``)
CASES = {
    "off": "console off (`--no-console`)",
    "on": "console on, nobody watching",
    "watched": "console open, {pages} pages polling",
}


def serve(console: bool) -> Callable[[int, Path], list[str]]:
    def command(port: int, workdir: Path) -> list[str]:
        argv = ["env", f"MLSERVE_DATA_DIR={workdir / 'data'}", sys.executable, "-m", "mlserve"]
        argv += ["serve", str(EXAMPLE), "--port", str(port)]
        return argv if console else [*argv, "--no-console"]

    return command


class Page:
    """One open console page: a tick reads ``POLLED`` together, the next comes ``EVERY``
    seconds after both answered; every answer must be a 200."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.calls = 0
        self.failures: list[str] = []
        self.done = threading.Event()
        self.pool = ThreadPoolExecutor(len(POLLED))
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def get(self, path: str) -> None:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as answer:
                answer.read()
        except OSError as exc:
            self.failures.append(f"{path}: {exc}")

    def run(self) -> None:
        while not self.done.is_set():
            list(self.pool.map(self.get, POLLED))
            self.calls += len(POLLED)
            self.done.wait(EVERY)

    def close(self) -> None:
        self.done.set()
        self.thread.join()
        self.pool.shutdown()


def measure(case: str, args: argparse.Namespace) -> dict[str, Any]:
    with running(serve(case != "off"), f"console-{case}") as (port, pid, _):
        url = f"http://127.0.0.1:{port}{INFER}"
        wrk_load(url, BODY, CONNECTIONS, args.warmup)
        cpu = cpu_seconds(pid)
        pages = [Page(port) for _ in range(args.pages if case == "watched" else 0)]
        try:
            result = wrk_load(url, BODY, CONNECTIONS, args.duration)
            result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
        finally:
            for page in pages:
                page.close()
        result["polls"] = sum(page.calls for page in pages)
    failures = [failure for page in pages for failure in page.failures]
    if failures or sum(result["errors"].values()):
        raise RuntimeError(f"errors: wrk {result['errors']}, console calls {failures[:3]}")
    progress(
        f"console: {case:8} {result['rps']:8,.0f} req/s {result['cpu_us']:6.1f} us "
        f"CPU/request, {result['polls']} console calls"
    )
    return {"case": case, **result}


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = heading(
        "The web console: its cost to serving",
        command_line("console", args, {"pages": 3}),
        f". `mlserve serve examples/serving.py`, wrk at {CONNECTIONS} connections on "
        f"`{INFER}`, alternating rounds (medians): the console off, on with nobody "
        f"watching (its history sampler runs every {EVERY:g} s), and open in {args.pages} "
        f"pages that each read `{POLLED[0]}` and `{POLLED[1]}` every {EVERY:g} s, as the "
        "models page does.",
    )
    stats = {
        case: median_of(group, "rps", "p99_us", "cpu_us", "polls")
        for (case,), group in grouped(rows, "case").items()
    }
    base = stats.get("off")
    body = []
    for case, s in stats.items():
        share = f"{s['rps'] / base['rps']:.2f}" if base else "-"
        body.append(
            [CASES[case].format(pages=args.pages), f"{s['rps']:,.0f}", share]
            + [f"{s['p99_us'] / 1e3:.2f}", f"{s['cpu_us']:.1f}", f"{s['polls']:.0f}"]
        )
    lines += table_lines(
        ["serve examples/serving.py", "requests/s", "of the console off", "p99 ms"]
        + ["server CPU us/request", "console calls in the run"],
        body,
    )
    watched = stats.get("watched")
    if base and watched:
        ratio = watched["rps"] / base["rps"]
        lines += [
            "",
            "Goals:",
            "",
            f"- serving with the console open ({args.pages} pages polling), requests/s of "
            f"the console off, at least {GOAL:.2f}: {ratio:.2f}, "
            f"{'met' if ratio >= GOAL else 'not met'} (CPU per request "
            f"{watched['cpu_us'] - base['cpu_us']:+.1f} us; console on, nobody watching: "
            f"{stats['on']['rps'] / base['rps']:.2f} of off)",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=10.0, warmup=1.0, repeat=5)
    parser.add_argument("--pages", type=int, default=3, help="console pages open and polling")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    rows = []
    for round_ in range(args.repeat):
        progress(f"console: round {round_ + 1}/{args.repeat}")
        rows += [measure(case, args) for case in CASES]
    save_raw("console", {"args": vars(args), "rows": rows})
    publish("console", table(rows, args), args)


if __name__ == "__main__":
    main()
