"""The monitor's speed: records consumed per second, its cost to serving, and how soon
drift shows.

    python -m benchmarks.monitoring [--records 300000] [--duration 5] [--repeat 3]
    python -m benchmarks.monitoring --no-doc

Three measurements:

- consume: one ``Monitor`` (``open_monitor`` on a JSON lines file, a SQLite store)
  pinned to one CPU reads ``--records`` records of 4-feature calls to ``--endpoints``
  endpoints (one row each, written by ``records.success_line`` as the pusher writes
  them, their ``when`` spread over ``--windows`` windows), from the partition state
  of a monitor that ran for days (the most closes it keeps) and after a warm-up
  (first-use imports), stepping until every record is counted and every window
  written; then the same run under py-spy (``--gil``), whose top functions and parts
  the section lists;
- serving: ``mlserve serve`` of examples/serving.py with tracking on to the data dir's
  file stream (a function file that calls ``set_tracking()``, as ``--monitor`` does),
  without and with ``--monitor``, wrk at 8 connections, alternating rounds; the CPU of
  the server process (its event loop, its other threads) and of the ``mlserve monitor``
  child that ``--monitor`` starts, apart;
- drift: ``mlserve serve examples/serving.py --monitor --monitor-window W`` under a
  paced load of ``--rate`` requests/s (wrk, each connection waiting for its slot of
  a shared schedule: ``benchmarks/wrk/paced.lua``), training-like rows, then rows
  shifted by +1.5; the time from the first shifted request until the endpoint's
  record (``GET /api/v1/projects/<p>/model-endpoints/<uid>``) first says something other
  than NO_DRIFT (POSSIBLE_DRIFT or DRIFT_DETECTED), and until it says DRIFT_DETECTED.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks.common import (
    HERE,
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
)
from benchmarks.common import wrk as wrk_load

CONSUME_GOAL = 50_000  # records/s one monitor consumes on one core
COST_GOAL = 0.90  # serving with --monitor keeps at least 90 % of tracking alone
DRIFT_GOAL = 2.0  # windows from the first shifted request to DRIFT_DETECTED
CONNECTIONS = 8
EXAMPLE = ROOT / "examples" / "serving.py"
REFERENCE = ROOT / "examples" / "models" / "flowers" / "feature_stats.json"
PACED = HERE / "wrk" / "paced.lua"
CENTERS = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]])
SHIFT = 1.5
TRACKED_FILE = """import runpy

fn = runpy.run_path({example!r})["serving_function"]()
fn.set_tracking()  # what `serve --monitor` does: the data dir's stream, endpoint records
"""


# ---- consume: records per second of one monitor ---------------------------------------


def write_stream(path: Path, records: int, endpoints: int, windows: int, window: float) -> float:
    """``records`` lines as the pusher writes them, round-robin over ``endpoints``
    models, their ``when`` spread evenly over ``windows`` windows that ended an hour
    ago, then one line a window and a grace later (it closes them all); the
    first window's start."""
    from mlserve.monitoring.records import ModelFields, success_line

    heads = [
        ModelFields(
            SimpleNamespace(name=f"model{i}", version="", model_endpoint_uid=f"uid{i}"),
            None,
            "bench/monitored:latest",
        )
        for i in range(endpoints)
    ]
    first = (time.time() // window - windows - 360) * window
    step_ns = int(windows * window * 1e9) // records
    start_ns = int(first * 1e9)
    rows = np.random.default_rng(5).normal(CENTERS[np.arange(records) % 3], 0.35).round(3)
    with path.open("wb") as file:
        for i, row in enumerate(rows.tolist()):
            request = {"id": str(i), "inputs": [row]}
            response = {"id": str(i), "model_name": "m", "outputs": [i % 3]}
            line = success_line(
                heads[i % endpoints], start_ns + i * step_ns, request, response, "infer", 180
            )
            file.write(line + b"\n")
        closer = {"inputs": [rows[0].tolist()]}
        at = int((first + (windows + 1) * window) * 1e9)
        file.write(success_line(heads[0], at, closer, {"outputs": [0]}, "infer", 180) + b"\n")
    return first


def register(store_url: str, endpoints: int, stream: Path, first: float, window: float) -> None:
    """The endpoints' records with the flowers reference, as a server registers them, and
    the stream's partition state as a monitor that ran for days leaves it: the most closes
    it keeps (``windows.MAX_CLOSES``), all before ``first``."""
    from mlserve.monitoring.endpoints import ModelEndpoint
    from mlserve.monitoring.sources import open_source
    from mlserve.monitoring.stores import open_store
    from mlserve.monitoring.windows import MAX_CLOSES

    reference = json.loads(REFERENCE.read_bytes())
    store = open_store(store_url)
    for i in range(endpoints):
        store.upsert(
            ModelEndpoint.model_validate(
                {
                    "metadata": {"project": "bench", "uid": f"uid{i}"},
                    "spec": {
                        "function_uri": "bench/monitored:latest",
                        "model": f"model{i}:latest",
                        "feature_names": list(reference),
                        "feature_stats": reference,
                    },
                }
            )
        )
    closes = [[first - (k + 1) * window, first - k * window, 0] for k in range(MAX_CLOSES)]
    state = {"boundary": first, "closes": closes[::-1], "position": 0}
    store.write_windows({}, open_source(str(stream)).name, 0, state)
    store.close()


def consume(stream: Path, store_url: str, window: float, expected: int) -> dict[str, Any]:
    """Step a fresh monitor until ``expected`` windows are written; its counts, the
    wall and CPU seconds."""
    from mlserve.monitoring.monitor import MonitorSettings, open_monitor

    settings = MonitorSettings(window=window, grace=1.0, poll_seconds=0.0)
    monitor = open_monitor(str(stream), store_url, settings)

    async def drain() -> None:
        while monitor.windows_written < expected:
            if not await monitor.step(timeout=0.0) and monitor.windows_written < expected:
                raise RuntimeError(f"the stream ended with {monitor.windows_written} windows")

    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(drain())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    monitor.close()
    return {"seconds": seconds, "cpu_s": cpu, **monitor.counts, "windows": monitor.windows_written}


def consume_child(args: argparse.Namespace) -> dict[str, Any]:
    """Run in a process of its own, pinned to one CPU: write the stream, then time one
    monitor consuming it."""
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    with tempfile.TemporaryDirectory(prefix="bench-monitor-") as tmp:
        stream = Path(tmp) / "model-logs.jsonl"
        first = write_stream(stream, args.records, args.endpoints, args.windows, args.window)
        warm_up(Path(tmp), args)
        store = f"sqlite:///{tmp}/endpoints.db"
        register(store, args.endpoints, stream, first, args.window)
        result = consume(stream, store, args.window, args.endpoints * args.windows)
        result["bytes"] = stream.stat().st_size
    if result["counted"] <= args.records:  # the records and the line that closes them
        raise RuntimeError(f"{result['counted']} of {args.records} records were counted")
    return result


def warm_up(tmp: Path, args: argparse.Namespace) -> None:
    """A small stream consumed first: the modules a monitor imports on first use
    (the flow, pandas) are not part of the timed run, as in a monitor that runs for days."""
    stream = tmp / "warm-up.jsonl"
    first = write_stream(stream, 2000, args.endpoints, 1, args.window)
    store = f"sqlite:///{tmp}/warm-up.db"
    register(store, args.endpoints, stream, first, args.window)
    consume(stream, store, args.window, args.endpoints)


def profile_consume(args: argparse.Namespace) -> dict[str, Any]:
    """The consume run again under py-spy (every thread, 250 Hz): the functions that own
    the samples, and the share of each part of the monitor."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory(prefix="bench-monitor-spy-") as tmp:
        raw = Path(tmp) / "samples.txt"
        command = [spy, "record", "--gil", "--nolineno", "-r", "250", "-f", "raw"]
        command += ["-o", str(raw), "--"]
        command += consume_command(args)
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode or not raw.exists():
            raise RuntimeError(f"py-spy failed:\n{done.stderr[-3000:]}")
        samples = [line.rpartition(" ") for line in raw.read_text().splitlines()]
    own: dict[str, int] = {}
    parts: dict[str, int] = {}
    total = 0
    for stack, _, count in samples:
        if not ("consume (" in stack or "_WorkerPool._work" in stack) or any(
            f"{step} (benchmarks" in stack for step in ("warm_up", "write_stream", "register")
        ):
            continue  # not the timed run: interpreter start, the stream written, warm-up
        frames = stack.split(";")
        weight = int(count)
        total += weight
        function, _, where = frames[-1].partition(" (")
        name = f"{function} ({where.rsplit('/', 1)[-1]}"
        own[name] = own.get(name, 0) + weight
        part = part_of(frames)
        parts[part] = parts.get(part, 0) + weight
    return {"own": own, "parts": parts, "samples": total}


# The part of the monitor a sample falls in: the innermost frame of these (first match).
PARTS = [
    ("count: parse and window each record (windows.py)", "(mlserve/monitoring/windows.py"),
    ("read the file stream (sources.py)", "(mlserve/monitoring/sources.py"),
    ("analyze: drift and applications", "analyze (mlserve/monitoring/monitor.py"),
    ("publish: the store's transaction", "publish (mlserve/monitoring/monitor.py"),
    ("count: the batch loop (monitor.py)", "count (mlserve/monitoring/monitor.py"),
]


def part_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, marker in PARTS:
            if marker in frame:
                return name
    return "the flow and the event loop"


def consume_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "benchmarks.monitoring", "--consume-child"]
    command += ["--records", str(args.records), "--endpoints", str(args.endpoints)]
    return command + ["--windows", str(args.windows), "--window", str(args.window)]


def measure_consume(args: argparse.Namespace) -> dict[str, Any]:
    done = subprocess.run(
        consume_command(args), cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise RuntimeError(f"the consume run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["rps"] = args.records / result["seconds"]
    progress(
        f"monitoring: consumed {args.records:,} records in {result['seconds']:.2f} s "
        f"({result['rps']:,.0f} records/s, {result['windows']} windows written)"
    )
    return result


# ---- serving: the cost of --monitor -----------------------------------------------------

BODY = json.dumps({"inputs": [[5.1, 3.5, 1.4, 0.2]]}).encode()
INFER = "/v2/models/flowers/infer"


def serve_tracked(monitor: bool, window: float) -> Callable[[int, Path], list[str]]:
    """``mlserve serve`` of examples/serving.py with tracking on to the work folder's data
    dir; ``monitor``: with ``--monitor --monitor-window window`` too."""

    def command(port: int, workdir: Path) -> list[str]:
        path = workdir / "tracked.py"
        path.write_text(TRACKED_FILE.format(example=str(EXAMPLE)))
        argv = ["env", f"MLSERVE_DATA_DIR={workdir / 'data'}", sys.executable, "-m", "mlserve"]
        argv += ["serve", str(path), "--port", str(port)]
        return argv + (["--monitor", "--monitor-window", f"{window:g}"] if monitor else [])

    return command


def measure_serving(monitor: bool, args: argparse.Namespace) -> dict[str, Any]:
    name = "monitor" if monitor else "tracking"
    with running(serve_tracked(monitor, args.window_serving), f"monitoring-{name}") as (
        port,
        pid,
        workdir,
    ):
        url = f"http://127.0.0.1:{port}{INFER}"
        wrk_load(url, BODY, CONNECTIONS, args.warmup)
        cpu, threads = cpu_seconds(pid), thread_seconds(pid)
        result = wrk_load(url, BODY, CONNECTIONS, args.duration)
        result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
        for part, seconds in thread_seconds(pid).items():
            result[f"{part}_us"] = (seconds - threads[part]) / result["requests"] * 1e6
        # the rest of the process group: the `mlserve monitor` child of --monitor
        result["child_us"] = result["cpu_us"] - result["main_us"] - result["threads_us"]
        with (workdir / "data" / "model-logs.jsonl").open("rb") as log:
            logged = sum(1 for _ in log)
    if sum(result["errors"].values()):
        raise RuntimeError(f"wrk counted errors: {result['errors']}")
    if logged < result["requests"]:
        raise RuntimeError(f"{result['requests']} answered, {logged} records logged")
    progress(
        f"monitoring: serving with {name:8} {result['rps']:8,.0f} req/s "
        f"{result['cpu_us']:6.1f} us CPU/request ({result['child_us']:.1f} in the monitor)"
    )
    return {"case": name, **result}


def thread_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of the server process's event loop (its main thread) and of its other
    threads (the stream's sender, the worker pool)."""
    parts = {"main": 0.0, "threads": 0.0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        parts["main" if task.name == str(pid) else "threads"] += seconds
    return parts


# ---- drift: how soon it shows ------------------------------------------------------------


def bodies(rng: np.random.Generator, shift: float, count: int = 2000) -> str:
    """``count`` one-row request bodies drawn as the training rows are (+ ``shift``)."""
    rows = rng.normal(CENTERS[rng.integers(0, 3, count)], 0.35) + shift
    return "".join(json.dumps({"inputs": [row]}) + "\n" for row in rows.round(3).tolist())


def paced(url: str, body_file: Path, rate: int, seconds: float) -> subprocess.Popen[str]:
    """wrk posting ``body_file``'s bodies at ``rate`` requests/s for ``seconds`` (started)."""
    threads = 2
    connections = max(threads, rate // 250)  # each connection: a request every ~4 ms at most
    argv = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s"]
    argv += ["--timeout", "10s", "-s", str(PACED), url]
    env = {
        **os.environ,
        "BENCH_BODIES": str(body_file),
        "BENCH_RATE": str(rate),
        "BENCH_THREADS": str(threads),
    }
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)


def wrk_result(process: subprocess.Popen[str]) -> dict[str, Any]:
    """Stop wrk (SIGINT: it prints its results, as at the end of its duration)."""
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def endpoint_status(port: int) -> tuple[str, str, str]:
    """The flowers endpoint's (uid, drift status, last window's end) from the server's API."""
    url = f"http://127.0.0.1:{port}/api/v1/projects/default/model-endpoints"
    with urllib.request.urlopen(url, timeout=10) as answer:
        listed = json.loads(answer.read())["endpoints"]
    (endpoint,) = [e for e in listed if e["spec"]["model"] == "flowers:latest"]
    status = endpoint["status"]
    return endpoint["metadata"]["uid"], status["drift_status"], status["window"].get("end", "")


def wait_status(port: int, wanted: set[str], timeout: float) -> tuple[float, str, str] | None:
    """Poll until the endpoint's drift status is one of ``wanted``: the monotonic time it
    was seen, the status and the end of the window that said it, or None after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, status, window_end = endpoint_status(port)
        if status in wanted:
            return time.monotonic(), status, window_end
        time.sleep(0.05)
    return None


def measure_drift(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per round: training-like load until the endpoint says NO_DRIFT, then, at the
    round's phase of a window, shifted rows until it first says something else, and
    until it says DRIFT_DETECTED."""
    window = args.drift_window
    rng = np.random.default_rng(17)
    rounds = []
    with (
        running(serve_monitored(window), "monitoring-drift") as (port, _, _),
        tempfile.TemporaryDirectory(prefix="bench-drift-") as tmp,
    ):
        url = f"http://127.0.0.1:{port}{INFER}"
        training, shifted = Path(tmp) / "training.txt", Path(tmp) / "shifted.txt"
        training.write_text(bodies(rng, 0.0))
        shifted.write_text(bodies(rng, SHIFT))
        limit = 6 * window + 20
        for number in range(args.drift_rounds):
            phase = (number + 0.5) / args.drift_rounds
            load = paced(url, training, args.rate, limit)
            calm = wait_status(port, {"NO_DRIFT"}, limit)
            if calm is None:
                wrk_result(load)
                raise RuntimeError(f"no NO_DRIFT within {limit:g} s of training-like load")
            # the shift starts at ``phase`` of a window (windows are aligned on the epoch)
            time.sleep((phase - time.time() / window % 1) % 1 * window)
            before = wrk_result(load)
            load = paced(url, shifted, args.rate, limit)
            shifted_at, shifted_wall = time.monotonic(), time.time()
            first = wait_status(port, {"POSSIBLE_DRIFT", "DRIFT_DETECTED"}, limit)
            seen = first if first and first[1] == "DRIFT_DETECTED" else None
            seen = seen or wait_status(port, {"DRIFT_DETECTED"}, limit)
            after = wrk_result(load)
            if first is None or seen is None:
                raise RuntimeError(f"no DRIFT_DETECTED within {limit:g} s of shifted load")
            seconds = seen[0] - shifted_at
            ended = datetime.fromisoformat(seen[2]).timestamp() - shifted_wall
            rounds.append(
                {
                    "phase": phase,
                    "first_seconds": first[0] - shifted_at,
                    "first_status": first[1],
                    "seconds": seconds,
                    "windows": seconds / window,
                    "window_ended": ended,
                    "rps_training": before["rps"],
                    "rps_shifted": after["rps"],
                }
            )
            progress(
                f"monitoring: shift at {phase:.2f} of a {window:g} s window: {first[1]} after "
                f"{first[0] - shifted_at:.1f} s, DRIFT_DETECTED after {seconds:.1f} s "
                f"({seconds / window:.2f} windows) at "
                f"{after['rps']:,.0f} req/s"
            )
    return rounds


def serve_monitored(window: float) -> Callable[[int, Path], list[str]]:
    def command(port: int, workdir: Path) -> list[str]:
        argv = ["env", f"MLSERVE_DATA_DIR={workdir / 'data'}", sys.executable, "-m", "mlserve"]
        argv += ["serve", str(EXAMPLE), "--port", str(port)]
        return argv + ["--monitor", "--monitor-window", f"{window:g}"]

    return command


# ---- the section ------------------------------------------------------------------------


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    lines = heading(
        "Monitoring: the monitor's speed",
        command(args),
        ". Three measurements (the module's docstring says how each is made): one monitor "
        "consuming a file stream on one CPU; `mlserve serve` with tracking on, without and "
        f"with `--monitor`, wrk at {CONNECTIONS} connections; the time until drift shows "
        f"under a paced load of {args.rate:,} requests/s.",
    )
    goals = ["", "Goals:", ""]
    consumed = results.get("consume")
    if consumed:
        mib = consumed["bytes"] / 2**20
        lines += table_lines(
            ["records", "endpoints", "windows", "stream MiB", "seconds", "records/s", "CPU s"]
            + ["records per CPU second"],
            [
                [
                    f"{args.records:,}",
                    args.endpoints,
                    consumed["windows"],
                    f"{mib:,.0f}",
                    f"{consumed['seconds']:.2f}",
                    f"{consumed['rps']:,.0f}",
                    f"{consumed['cpu_s']:.2f}",
                    f"{args.records / consumed['cpu_s']:,.0f}",
                ]
            ],
            labels=0,
        )
        lines += ["", *profile_lines(results.get("profile"), args)]
        ratio = consumed["rps"] / CONSUME_GOAL
        goals.append(
            f"- records/s one monitor consumes on one CPU, at least {CONSUME_GOAL:,}: "
            f"{consumed['rps']:,.0f} ({ratio:.2f}x), {'met' if ratio >= 1 else 'not met'} "
            f"({args.records / consumed['cpu_s']:,.0f} per CPU second)"
        )
    serving = results.get("serving")
    if serving:
        stats = {
            case: median_of(rows, "rps", "cpu_us", "p99_us", "main_us", "threads_us", "child_us")
            for (case,), rows in grouped(serving, "case").items()
        }
        base = stats.get("tracking")
        rows = []
        for case, s in stats.items():
            ratio = f"{s['rps'] / base['rps']:.2f}" if base else "-"
            label = "tracking, `--monitor`" if case == "monitor" else "tracking alone"
            rows.append(
                [label, f"{s['rps']:,.0f}", ratio, f"{s['p99_us'] / 1e3:.2f}", f"{s['cpu_us']:.1f}"]
                + [f"{s['main_us']:.1f}", f"{s['threads_us']:.1f}", f"{s['child_us']:.1f}"]
            )
        lines += table_lines(
            [
                "serve examples/serving.py",
                "requests/s",
                "of tracking alone",
                "p99 ms",
                "CPU us/request, all processes",
                "server's event loop",
                "server's other threads",
                "monitor process",
            ],
            rows,
        ) + [""]
        if base and "monitor" in stats:
            ratio = stats["monitor"]["rps"] / base["rps"]
            cpu = base["cpu_us"] / stats["monitor"]["cpu_us"]
            goals.append(
                f"- serving with `--monitor`, requests/s of tracking alone, at least "
                f"{COST_GOAL:.2f}: {ratio:.2f}, {'met' if ratio >= COST_GOAL else 'not met'} "
                f"(CPU per request tracking alone/`--monitor`: {cpu:.2f}, "
                + ("met" if cpu >= COST_GOAL else "not met")
                + f"; {stats['monitor']['cpu_us'] - base['cpu_us']:+.1f} us per request)"
            )
    drift = results.get("drift")
    if drift:
        from mlserve.monitoring.monitor import MonitorSettings

        grace = MonitorSettings(window=args.drift_window).grace_seconds
        lines += table_lines(
            [
                "shift at (share of a window)",
                "first status after NO_DRIFT",
                "to it, s",
                "to DRIFT_DETECTED, s",
                "windows",
                "its window ended, s after the shift",
                "requests/s training-like",
                "requests/s shifted",
            ],
            (
                [
                    f"{r['phase']:.2f}",
                    r["first_status"],
                    f"{r['first_seconds']:.1f}",
                    f"{r['seconds']:.1f}",
                    f"{r['windows']:.2f}",
                    f"{r['window_ended']:.1f}",
                    f"{r['rps_training']:,.0f}",
                    f"{r['rps_shifted']:,.0f}",
                ]
                for r in drift
            ),
        )
        lines += [
            "",
            f"A window is written once the stream is {grace:g} s past its end (the grace "
            "for late records: a tenth of the window, at most 10 s), so the time to "
            "DRIFT_DETECTED is the end of the first window with enough shifted rows, plus "
            "the grace, plus the step that writes it.",
            "",
        ]
        worst = max(r["windows"] for r in drift)
        reached = min(r["rps_shifted"] for r in drift)
        goals.append(
            f"- drift shows within {DRIFT_GOAL:g} windows at {args.rate:,} requests/s "
            f"({args.drift_window:g} s windows): {worst:.2f} windows (the slowest of "
            f"{len(drift)}), {'met' if worst <= DRIFT_GOAL else 'not met'} "
            f"({reached:,.0f} requests/s reached at the least; the first status other than "
            f"NO_DRIFT within {max(r['first_seconds'] for r in drift) / args.drift_window:.2f} "
            "windows)"
        )
    return re.sub(r"\n{3,}", "\n\n", "\n".join([*lines, *goals]))


def profile_lines(profile: dict[str, Any] | None, args: argparse.Namespace) -> list[str]:
    """Where the consume run's time goes (py-spy's samples of it)."""
    if not profile or not profile["samples"]:
        return []
    total = profile["samples"]
    lines = [
        f"Where the time goes: py-spy (`record --gil`, 250 Hz: the thread holding the GIL) "
        f"on the same run, {total} samples of the timed part.",
        "",
    ]
    parts = sorted(profile["parts"].items(), key=lambda item: -item[1])
    lines += table_lines(["part", "share"], ([p, f"{w / total:.0%}"] for p, w in parts))
    own = sorted(profile["own"].items(), key=lambda item: -item[1])[: args.top]
    lines += [
        "",
        *table_lines(
            ["function (own time)", "share"], ([f"`{n}`", f"{w / total:.1%}"] for n, w in own)
        ),
    ]
    return [*lines, ""]


def command(args: argparse.Namespace) -> str:
    words = [f"python -m benchmarks.monitoring --records {args.records}"]
    words.append(f"--duration {args.duration:g} --repeat {args.repeat}")
    words.append(f"--rate {args.rate} --drift-window {args.drift_window:g}")
    return " ".join(words)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0, warmup=1.0, repeat=3)
    parser.add_argument(
        "--measure",
        nargs="+",
        default=["consume", "serving", "drift"],
        choices=["consume", "serving", "drift"],
    )
    parser.add_argument("--records", type=int, default=300_000, help="records consumed")
    parser.add_argument("--endpoints", type=int, default=4, help="endpoints of the records")
    parser.add_argument("--windows", type=int, default=3, help="windows the records span")
    parser.add_argument("--window", type=float, default=60.0, help="consume: window seconds")
    parser.add_argument(
        "--serving-window",
        dest="window_serving",
        type=float,
        default=5.0,
        help="serving: --monitor-window",
    )
    parser.add_argument("--rate", type=int, default=5000, help="drift: requests/s")
    parser.add_argument("--drift-window", type=float, default=5.0, help="drift: window seconds")
    parser.add_argument(
        "--drift-rounds",
        type=int,
        default=3,
        help="drift: rounds, the shift at a different phase of a window each",
    )
    parser.add_argument("--no-profile", action="store_true", help="no py-spy run of consume")
    parser.add_argument("--top", type=int, default=12, help="functions the profile lists")
    parser.add_argument("--consume-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.consume_child:
        print(json.dumps(consume_child(args)))
        return
    exit_on_sigterm()
    results: dict[str, Any] = {}
    if "consume" in args.measure:
        results["consume"] = measure_consume(args)
        if not args.no_profile:
            progress("monitoring: the consume run again, under py-spy")
            results["profile"] = profile_consume(args)
    if "serving" in args.measure:
        rows = []
        for round_ in range(args.repeat):
            progress(f"monitoring: serving round {round_ + 1}/{args.repeat}")
            rows += [measure_serving(monitor, args) for monitor in (False, True)]
        results["serving"] = rows
    if "drift" in args.measure:
        results["drift"] = measure_drift(args)
    save_raw("monitoring", {"args": vars(args), **results})
    publish("monitoring", table(results, args), args)


if __name__ == "__main__":
    main()
