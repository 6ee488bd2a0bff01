"""The cost of model monitoring: throughput with tracking on, as a share of tracking off.

    python -m benchmarks.tracking [--duration 4] [--repeat 3] [--streams off file kafka]
    python -m benchmarks.tracking --no-doc

One small model (``benchmarks/servers/tracking_model.py``: sums the rows of a 2x4
row request), with tracking off, on to a JSON lines file, and on to Kafka (a local
tansu broker), measured two ways:

- in-process: the mock server (``fn.to_mock_server()``) in a process of its own,
  8 caller threads calling ``server.test`` for ``--duration`` seconds;
- HTTP: ``mlserve serve`` on a function file with ``fn.set_tracking(stream_path=...)``
  (endpoint records on too, memory store), ``wrk`` at 8 connections.

Rounds alternate off / file / kafka; the tables give medians of the rounds, the
ratio of each stream's requests/s to tracking off, and the CPU time per request of
the measured process (all its threads: the pusher's included), which moves less
than requests/s when other jobs share the machine. Every logged call must reach
the file: after each file run the lines are counted against the calls answered.

Both swing with the machine's load (this is a 2-core machine shared with the load
generator); the instructions a request executes do not. So the section also gives
tracking's cost counted by callgrind (``python -m benchmarks.instructions --case
tracking``: the HTTP protocol in-process, off and with a file stream, the sender
thread included), unless valgrind is missing or ``--no-count`` is given.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    arguments,
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
from benchmarks.servers.tracking_model import ANSWER, BODY

CONNECTIONS = 8
PATHS = ["in-process", "http"]
GOAL = 0.90  # tracking on (file) keeps at least 90 % of the throughput of off
FUNCTION_FILE = """from benchmarks.servers.tracking_model import tracked_function

fn = tracked_function({stream!r})
"""


# ---- in-process -----------------------------------------------------------------------


def inproc_child(stream: str, duration: float, callers: int) -> dict[str, Any]:
    """Run in a process of its own: ``callers`` threads call the mock server's ``test``
    for ``duration`` seconds (after a warm-up); calls, seconds and process CPU seconds."""
    from benchmarks.servers.tracking_model import tracked_function

    server = tracked_function(stream).to_mock_server()
    if server.test("/v2/models/m/infer", json.loads(BODY))["outputs"] != ANSWER:
        raise RuntimeError("the mock server answered wrong")
    counts = [0] * callers
    stop = threading.Event()

    def call(index: int) -> None:
        body = json.loads(BODY)
        while not stop.is_set():
            server.test("/v2/models/m/infer", body)
            counts[index] += 1

    threads = [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    time.sleep(min(1.0, duration / 2))  # warm-up
    calls, cpu, start = sum(counts), time.process_time(), time.perf_counter()
    sender = sender_cpu()
    time.sleep(duration)
    calls, cpu = sum(counts) - calls, time.process_time() - cpu
    sender = sender_cpu() - sender
    seconds = time.perf_counter() - start
    stop.set()
    for thread in threads:
        thread.join()
    server.wait_for_completion()  # flushes the stream
    return {"calls": calls, "seconds": seconds, "cpu_s": cpu, "sender_s": sender}


def sender_cpu() -> float:
    """CPU seconds of the stream's sender thread so far (0 with tracking off): the part of
    tracking's cost that other jobs on the machine move least."""
    return sum(
        time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        for thread in threading.enumerate()
        if thread.name == "mlserve-stream-pusher" and thread.ident is not None
    )


def measure_inproc(stream: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.tracking", "--inproc-child", stream]
    command += ["--duration", str(args.duration), "--callers", str(args.callers)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"in-process run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "rps": result["calls"] / result["seconds"],
        "cpu_us": result["cpu_s"] / result["calls"] * 1e6,
        "sender_us": result["sender_s"] / result["calls"] * 1e6,
    }


# ---- HTTP -----------------------------------------------------------------------------


def serve(stream: str) -> Callable[[int, Path], list[str]]:
    """The command of ``mlserve serve`` on a function file with tracking to ``stream``."""

    def command(port: int, workdir: Path) -> list[str]:
        path = workdir / "tracked.py"
        path.write_text(FUNCTION_FILE.format(stream=stream))
        return [sys.executable, "-m", "mlserve", "serve", str(path), "--port", str(port)]

    return command


def check_answer(url: str) -> None:
    request = urllib.request.Request(url, BODY, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        outputs = json.loads(answer.read())["outputs"]
    if outputs != ANSWER:
        raise RuntimeError(f"{url} answered {outputs}")


def measure_http(stream: str, args: argparse.Namespace) -> dict[str, Any]:
    with running(serve(stream), "tracking") as (port, pid, _):
        url = f"http://127.0.0.1:{port}/v2/models/m/infer"
        check_answer(url)
        wrk(url, BODY, CONNECTIONS, args.warmup)
        cpu = cpu_seconds(pid)
        result = wrk(url, BODY, CONNECTIONS, args.duration)
        result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
    if sum(result["errors"].values()):
        raise RuntimeError(f"wrk counted errors: {result['errors']}")
    return result


# ---- the run --------------------------------------------------------------------------


def lines_in(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as file:
        return sum(1 for _ in file)


def measure(name: str, args: argparse.Namespace, broker: str) -> list[dict[str, Any]]:
    """One point of each path for stream ``name``; a file stream is checked lossless."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-tracking-") as tmp:
        file = Path(tmp) / "model-logs.jsonl"
        stream = {"off": "", "file": str(file), "kafka": f"kafka://{broker}?topic=bench"}[name]
        for path, run in (("in-process", measure_inproc), ("http", measure_http)):
            before = lines_in(file)
            result = run(stream, args)
            logged = lines_in(file) - before
            if name == "file" and path == "http" and logged < result["requests"]:
                raise RuntimeError(f"{result['requests']} answered, {logged} records in the file")
            progress(
                f"tracking {path:10} {name:5} {result['rps']:8.0f} req/s "
                f"{result['cpu_us']:6.1f} us CPU/request"
                + (f" ({result['sender_us']:.1f} sender)" if "sender_us" in result else "")
                + (f"  {logged} records" if name == "file" else "")
            )
            rows.append({"path": path, "stream": name, "rps": result["rps"], **result})
    return rows


Stats = dict[tuple[str, str], dict[str, float]]


def medians(rows: list[dict[str, Any]]) -> Stats:
    groups = grouped(rows, "path", "stream")
    return {
        key: median_of(group, *(k for k in ("rps", "cpu_us", "sender_us") if k in group[0]))
        for key, group in sorted(groups.items(), key=lambda item: PATHS.index(item[0][0]))
    }


def table(stats: Stats, args: argparse.Namespace, counts: dict[str, float] | None = None) -> str:
    lines = heading(
        "Tracking: model monitoring on vs off",
        f"python -m benchmarks.tracking --duration {args.duration:g} --repeat {args.repeat}",
        f"; {args.duration:g} s per point after a {args.warmup:g} s warm-up, median of "
        f"{args.repeat} alternating rounds (off, "
        + ", ".join(s for s in args.streams if s != "off")
        + f"). In-process: {args.callers} threads calling `server.test` on the mock server; "
        f"HTTP: `mlserve serve`, wrk at {CONNECTIONS} connections. CPU: the measured "
        "process, all threads (the stream's sender included); the sender thread's own CPU "
        "is read in-process.",
    )
    rows = []
    for (path, stream), s in stats.items():
        off = stats.get((path, "off"))
        ratio = f"{s['rps'] / off['rps']:.2f}" if off else "-"
        cpu = f"{off['cpu_us'] / s['cpu_us']:.2f}" if off else "-"
        sender = f"{s['sender_us']:.1f}" if "sender_us" in s and stream != "off" else "-"
        rows.append([path, stream, f"{s['rps']:,.0f}", ratio, f"{s['cpu_us']:.1f}", cpu, sender])
    header = ["path", "tracking", "requests/s", "on/off requests/s", "CPU us/request"]
    header += ["off/on CPU", "sender thread CPU us/request"]
    lines += table_lines(header, rows, labels=2)
    return "\n".join([*lines, "", *counted_lines(counts), goals(stats)])


def counted(requests: int) -> dict[str, float]:
    """Instructions per HTTP request with tracking off and to a file (callgrind)."""
    from benchmarks.instructions import per_request

    counts = {}
    for stream in ("off", "file"):
        progress(f"tracking: instructions per request, {stream} (two callgrind runs)")
        counts[stream] = per_request("tracking", stream, requests)
    return counts


def counted_lines(counts: dict[str, float] | None) -> list[str]:
    if not counts:
        return []
    extra = counts["file"] / counts["off"] - 1
    return [
        "Counted, not timed (`python -m benchmarks.instructions --case tracking`: the HTTP "
        "protocol fed the same request in-process, 8 clients, the sender thread included): "
        f"{counts['off'] / 1e3:,.1f}k instructions per request off, "
        f"{counts['file'] / 1e3:,.1f}k with a file stream: tracking adds {extra:.1%}.",
        "",
    ]


def goals(stats: Stats) -> str:
    lines = [f"Goals: tracking on (file stream) keeps at least {GOAL:.2f} of off:", ""]
    for path in ("in-process", "http"):
        on, off = stats.get((path, "file")), stats.get((path, "off"))
        if not (on and off):
            lines.append(f"- {path}: not evaluated (off and file were not both measured)")
            continue
        ratio, cpu = on["rps"] / off["rps"], off["cpu_us"] / on["cpu_us"]
        lines.append(
            f"- {path}, requests/s on/off: {ratio:.2f}, "
            + ("met" if ratio >= GOAL else "not met")
            + f" (CPU per request off/on: {cpu:.2f}, "
            + ("met" if cpu >= GOAL else "not met")
            + f"; {on['cpu_us'] - off['cpu_us']:+.1f} us CPU per request)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    helps = {"warmup": "seconds of load first (HTTP)"}
    parser = arguments(__doc__, helps, duration=4.0, warmup=1.0, repeat=3)
    parser.add_argument("--callers", type=int, default=8, help="in-process caller threads")
    parser.add_argument("--streams", nargs="+", default=["off", "file", "kafka"])
    parser.add_argument("--no-count", action="store_true", help="no callgrind instruction count")
    parser.add_argument("--inproc-child", metavar="STREAM", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inproc_child is not None:
        print(json.dumps(inproc_child(args.inproc_child, args.duration, args.callers)))
        return
    exit_on_sigterm()
    broker = None
    if "kafka" in args.streams:
        from tests.services import start_kafka

        progress("tracking: starting a tansu Kafka broker")
        broker = start_kafka()
    rows: list[dict[str, Any]] = []
    try:
        for round_ in range(args.repeat):
            progress(f"tracking: round {round_ + 1}/{args.repeat}")
            for name in args.streams:
                url = broker.url if broker else ""
                rows += [{**row, "round": round_} for row in measure(name, args, url)]
    finally:
        if broker is not None:
            broker.stop()
    counts = None if args.no_count or shutil.which("valgrind") is None else counted(1000)
    save_raw("tracking", {"args": vars(args), "runs": rows, "instructions": counts})
    publish("tracking", table(medians(rows), args, counts), args)


if __name__ == "__main__":
    main()
