"""What every benchmark shares: peers' environments, servers started and stopped by
PID, wrk, CPU time, progress lines, the command line, and the generated sections of
docs/performance.md (each headed by the machine: CPU model and load average).

Each benchmark module (``python -m benchmarks.<name>``) owns one section of the
document, between ``<!-- <key>-begin -->`` and ``<!-- <key>-end -->``;
``python -m benchmarks`` (``make bench``) runs them all in turn.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENVS = HERE / ".envs"
RESULTS = HERE / "results"
DOC = ROOT / "docs" / "performance.md"
LUA = HERE / "wrk" / "post.lua"

# The peers, each in a virtual environment of its own (they bring their own numpy 2.x).
PEERS = {
    "mlserver": ["mlserver==1.7.1"],
    "kserve": ["kserve==0.21.0"],
    "mlrun": ["mlrun==1.12.1"],
}

_started = time.monotonic()


def progress(message: str) -> None:
    """One line per step, with the time since the run began: a long run shows where it is."""
    elapsed = time.monotonic() - _started
    print(f"[bench {elapsed:6.0f}s] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- environments -----------------------------------------------------------------


def env_python(name: str | None) -> str:
    """The interpreter of peer environment ``name``; ours for None."""
    return str(ENVS / name / "bin" / "python") if name else sys.executable


def ensure_package(env: str, spec: str, module: str) -> None:
    """Install ``spec`` into peer environment ``env`` unless ``module`` imports there."""
    python = ensure_env(env)
    if subprocess.run([python, "-c", f"import {module}"], capture_output=True).returncode:
        progress(f"installing {spec} into the {env} environment; minutes, once")
        subprocess.run([python, "-m", "pip", "install", "-q", spec], check=True)


def ensure_env(name: str) -> str:
    """Create benchmarks/.envs/<name> with the peer installed, unless it exists; its python."""
    python = env_python(name)
    if Path(python).exists() and version(name):
        return python
    progress(f"creating the {name} environment ({' '.join(PEERS[name])}); minutes, once")
    subprocess.run([base_python(), "-m", "venv", "--clear", str(ENVS / name)], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", *PEERS[name]], check=True)
    return python


def base_python() -> str:
    """The interpreter this venv was made from: peers get a clean venv, not ours."""
    return getattr(sys, "_base_executable", sys.executable)


def version(env: str | None, package: str | None = None) -> str:
    """The installed version of ``package`` (default: the peer's own) in ``env``."""
    python = env_python(env)
    if not Path(python).exists():  # a peer not measured this time
        return ""
    code = f"import importlib.metadata as m; print(m.version({(package or env)!r}))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip()


# ---- servers ----------------------------------------------------------------------


@contextlib.contextmanager
def running(
    command: Callable[[int, Path], list[str]],
    name: str = "server",
    ready_path: str = "/v2/health/ready",
    ready: Callable[[int], bool] | None = None,
) -> Iterator[tuple[int, int, Path]]:
    """Start ``command(port, workdir)`` on a free port, in a session of its own; yield its
    port, PID and work folder once ready; stop it (SIGTERM, then SIGKILL) by PID.

    Ready is a 200 at ``ready_path``, or ``ready(port)`` returning true (gRPC-only servers).
    """
    port = free_port()
    label = re.sub(r"[^\w.-]+", "-", name)  # a case name ("mlserve / off") as a folder name
    with tempfile.TemporaryDirectory(prefix=f"bench-{label}-") as tmp:
        workdir = Path(tmp)
        log_path = workdir / "server.log"
        with log_path.open("wb") as log:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
            process = subprocess.Popen(
                command(port, workdir),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            try:
                probe = ready or (lambda p: http_ok(f"http://127.0.0.1:{p}{ready_path}"))
                wait_until(lambda: probe(port), process, log_path)
                yield port, process.pid, workdir
            finally:
                stop(process)


def http_ok(url: str) -> bool:
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    return False


def wait_until(
    check: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, timeout: float = 180
) -> float:
    """Poll ``check`` until true; the seconds it took. Fails with the log's tail if the
    process exits or ``timeout`` passes."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    raise RuntimeError(f"server not ready after {timeout:g}s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process's group (its PID), SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def group_pids(pid: int) -> list[int]:
    """The processes of ``pid``'s process group (the server and its workers)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) == pid:
                pids.append(int(stat.parent.name))
    return pids


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of the server's process group; steadier than req/s
    on a shared machine."""
    total = 0
    for member in group_pids(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of the server's process group, in MiB."""
    total = 0
    for member in group_pids(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


# The 1-minute load when this run began (the module is imported first thing): what the tables
# report, since by their end the run itself is the load.
STARTED_AT_LOAD = os.getloadavg()[0]


# ---- load -------------------------------------------------------------------------


def wrk(
    url: str,
    body: bytes,
    connections: int,
    duration: float,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
    paths: list[str] | None = None,
) -> dict[str, Any]:
    """POST ``body`` to ``url`` with wrk (to each of ``paths`` in turn, if given);
    requests/s, latency percentiles (us), errors."""
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: run `make system-deps`")
    with tempfile.NamedTemporaryFile(prefix="bench-body-", delete=False) as file:
        file.write(body)
    argv = ["wrk", "-t", str(min(connections, 2)), "-c", str(connections)]
    seconds = max(1, round(duration))  # wrk takes whole seconds
    argv += ["-d", f"{seconds}s", "--timeout", "10s", "-s", str(LUA), url]
    env = {
        **os.environ,
        "BENCH_BODY": file.name,
        "BENCH_CONTENT_TYPE": content_type,
        "BENCH_HEADERS": "\n".join(f"{k}: {v}" for k, v in (headers or {}).items()),
        "BENCH_PATHS": ",".join(paths or []),
    }
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    finally:
        os.unlink(file.name)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


def grouped(
    rows: Sequence[dict[str, Any]], *fields: str
) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """The rows by the values of ``fields`` (the rounds of one point), in first-seen order."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[field] for field in fields), []).append(row)
    return groups


def median_of(rows: Sequence[dict[str, Any]], *keys: str) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in keys}


# ---- command line -----------------------------------------------------------------

# The options of a timed run, with the words every benchmark gives them.
RUN_OPTIONS = {
    "duration": (float, "seconds per point"),
    "warmup": (float, "seconds of load first"),
    "repeat": (int, "alternating rounds (medians)"),
}


def arguments(
    doc: str | None, helps: dict[str, str] | None = None, **defaults: float
) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring, the run options it gives a default
    (``duration``, ``warmup``, ``repeat``; ``helps`` rewords them) and ``--no-doc``."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for name, default in defaults.items():
        kind, words = RUN_OPTIONS[name]
        parser.add_argument(
            f"--{name}", type=kind, default=default, help=(helps or {}).get(name, words)
        )
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/performance.md")
    return parser


# ---- report -----------------------------------------------------------------------


def machine() -> str:
    """One sentence: when, on what, with which versions; heads every generated section."""
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")),
        platform.processor(),
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{date}, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"mlserve {version(None, 'mlserve')} (commit {commit}), "
        f"1-minute load average {STARTED_AT_LOAD:.2f} at the start"
    )


def heading(title: str, command: str, details: str) -> list[str]:
    """A section's first lines: its title, the command that measured it and the machine
    (CPU model and load average: no table's numbers mean much without them), then
    ``details`` (from their leading "." or ";")."""
    return [f"## {title}", "", f"Command: `{command}`. {machine()}{details}", ""]


def table_lines(header: Sequence[str], rows: Iterable[Sequence[Any]], labels: int = 1) -> list[str]:
    """A Markdown table: ``labels`` columns of names first (aligned left), then numbers
    (aligned right); each row's cells already formatted."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * labels + "---:|" * (len(header) - labels),
        *("| " + " | ".join(map(str, row)) + " |" for row in rows),
    ]


def publish(key: str, text: str, args: argparse.Namespace) -> None:
    """Print a benchmark's section and, unless ``--no-doc``, write it into the document."""
    print(text)
    if not args.no_doc:
        write_section(key, text)


def write_section(key: str, text: str) -> None:
    """Replace (or append) the section ``key`` of docs/performance.md, keep the rest."""
    begin, end = f"<!-- {key}-begin -->", f"<!-- {key}-end -->"
    section = f"{begin}\n{text.strip()}\n{end}"
    doc = DOC.read_text() if DOC.exists() else "# Performance\n"
    if begin in doc and end in doc:
        doc = doc[: doc.index(begin)] + section + doc[doc.index(end) + len(end) :]
    else:
        doc = doc.rstrip("\n") + "\n\n" + section + "\n"
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(doc)


def save_raw(name: str, data: Any) -> Path:
    """Keep a run's raw numbers in benchmarks/results/ (gitignored)."""
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def exit_on_sigterm() -> None:
    """SIGTERM leaves through the ``finally`` blocks that stop the servers, as Ctrl-C does."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def baseline_tree(ref: str, workdir: Path) -> Path:
    """mlserve's package as of git ``ref``, exported under ``workdir``: put it first on
    PYTHONPATH (and run ``python -P``) to serve the baseline of an A/B."""
    tree = workdir / "baseline"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "archive", ref, "mlserve"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def from_tree(tree: Path, command: list[str]) -> list[str]:
    """``command`` (``python -m mlserve ...``) run with the package of ``tree``: -P keeps
    the work folder (this tree) from going before PYTHONPATH."""
    return ["env", f"PYTHONPATH={tree}", command[0], "-P", *command[1:]]


def ab_lines(stats: dict[tuple[str, str, int], dict[str, float]], ref: str | None) -> list[str]:
    """With a baseline: mlserve now against mlserve at ``ref``, point by point (server CPU
    per request and requests/s), both measured in the same alternating rounds."""
    if not ref:
        return []
    base = f"mlserve@{ref}"
    rows = []
    for (name, form, conns), now in stats.items():
        before = stats.get((base, form, conns))
        if name == "mlserve" and before:
            change = now["cpu_us"] / before["cpu_us"] - 1
            cpu = f"{before['cpu_us']:.0f} -> {now['cpu_us']:.0f} ({change:+.0%})"
            rows.append([form, conns, cpu, f"{now['rps'] / before['rps']:.2f}x"])
    header = ["request", "connections", f"CPU us/request {base} -> mlserve"]
    return ["", *table_lines([*header, f"req/s mlserve/{base}"], rows)]


def command_line(module: str, args: argparse.Namespace, defaults: dict[str, Any]) -> str:
    """The command that reproduces a run: duration and rounds, then each option of
    ``defaults`` whose value differs from its default (a flag by its name alone)."""
    words = [f"python -m benchmarks.{module}", f"--duration {args.duration:g}"]
    words.append(f"--repeat {args.repeat}")
    for name, default in defaults.items():
        value = getattr(args, name)
        if value == default or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        if value is True:
            words.append(flag)
        elif isinstance(value, list):
            words.append(f"{flag} {' '.join(map(str, value))}")
        else:
            words.append(f"{flag} {value}")
    return " ".join(words)
