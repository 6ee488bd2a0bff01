"""Start-up: what ``import mlserve`` costs, and how long ``mlserve serve`` takes to be ready.

    python -m benchmarks.startup [--repeat 7] [--serve-repeat 3] [--no-tf] [--no-doc]
    python -m benchmarks.startup --compare /tmp/old   # also an older mlserve, alternating

Imports: each statement runs in a fresh interpreter of this venv, which counts
the modules it adds to ``sys.modules`` and times it (wall and CPU of the
process); ``-X importtime`` shows the same cost module by module. With
``--compare DIR`` the ``mlserve`` package under DIR (an older checkout) is
measured too, imports and the echo server, its runs alternating with ours.

Serving: the time from starting ``mlserve serve <file>`` to the first 200 on
``/v2/health/ready`` (polled every 50 ms), and the server's CPU seconds by
then, for the echo model of the HTTP table, for a small Keras SavedModel under
``TFModelServer``, and for MLServer 1.7.1 serving the same echo model (its own
venv, created on first use). Rounds alternate the servers; medians are given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    arguments,
    cpu_seconds,
    ensure_env,
    exit_on_sigterm,
    heading,
    progress,
    publish,
    running,
    save_raw,
    table_lines,
    version,
)
from benchmarks.http_load import _mlserve, _mlserver

Command = Callable[[int, Path], list[str]]  # a server's argv for (port, work folder)

GOAL_MODULES = 300
GOAL_MS = 150.0

# What a user writes first: the package, a model class, every public name.
STATEMENTS = {
    "import mlserve": "import mlserve",
    "define a model": "import mlserve\nclass M(mlserve.V2ModelServer): pass",
    "every public name": "from mlserve import *",
}

# Run in a fresh interpreter: modules added, wall ms, CPU ms of the statement.
_PROBE = """
import resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
before, wall, spent = len(sys.modules), time.perf_counter(), cpu()
exec(compile(sys.argv[1], "<statement>", "exec"), {})
print(len(sys.modules) - before, (time.perf_counter() - wall) * 1e3, (cpu() - spent) * 1e3)
"""


def probe(statement: str, path: Path) -> dict[str, float]:
    """One fresh interpreter running ``statement`` with ``path`` first on sys.path."""
    env = {**os.environ, "PYTHONPATH": str(path), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # users import from bytecode, written once
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, statement],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=path,
    ).stdout.split()
    return {"modules": int(out[0]), "wall_ms": float(out[1]), "cpu_ms": float(out[2])}


def measure_imports(args: argparse.Namespace) -> list[dict[str, Any]]:
    trees = {"now": ROOT, **({"before": Path(args.compare).resolve()} if args.compare else {})}
    for path in trees.values():  # bytecode written once, outside the timed runs
        probe("from mlserve import *", path)
    rows = []
    for round_ in range(args.repeat):
        for label, statement in STATEMENTS.items():
            for tree, path in trees.items():
                row = {"tree": tree, "label": label, "round": round_, **probe(statement, path)}
                rows.append(row)
        progress(f"startup: import round {round_ + 1}/{args.repeat} done")
    return rows


def time_to_ready(name: str, command: Command) -> dict[str, float]:
    """Seconds from starting the server to its first 200 on /v2/health/ready, and its CPU."""
    start = time.monotonic()
    with running(command, name) as (_port, pid, _):
        seconds = time.monotonic() - start
        cpu = cpu_seconds(pid)
    progress(f"startup: {name:22} ready in {seconds:5.2f} s ({cpu:.2f} s CPU)")
    return {"seconds": seconds, "cpu_s": cpu}


def _older(command: Command, tree: str) -> Command:
    """``command`` with the mlserve package of ``tree`` (``env`` execs: the PID stays)."""
    return lambda port, workdir: ["env", f"PYTHONPATH={tree}", *command(port, workdir)]


def measure_serving(args: argparse.Namespace) -> list[dict[str, Any]]:
    servers: dict[str, Command] = {"mlserve echo": _mlserve}
    if args.compare:
        servers["mlserve echo (before)"] = _older(_mlserve, str(Path(args.compare).resolve()))
    if not args.no_tf:
        from benchmarks.tf_batching import mlserve_command, save_model

        servers["mlserve TF"] = mlserve_command(save_model(), batching=False)
    if not args.no_mlserver:
        ensure_env("mlserver")
        servers["MLServer echo"] = _mlserver
    rows = []
    for round_ in range(args.serve_repeat):
        for name, command in servers.items():
            rows.append({"server": name, "round": round_, **time_to_ready(name, command)})
    return rows


def _median(rows: list[dict[str, Any]], key: str, **match: Any) -> float:
    return statistics.median(r[key] for r in rows if all(r[k] == v for k, v in match.items()))


_IMPORT_KEYS = ("modules", "wall_ms", "cpu_ms")


def report(imports: list[dict[str, Any]], serving: list[dict[str, Any]], argv: str) -> str:
    trees = sorted({r["tree"] for r in imports}, reverse=True)  # "now" before "before"
    lines = heading(
        "Start-up",
        f"python -m benchmarks.startup{argv}",
        f"; MLServer {version('mlserver') or 'not measured'}. Imports: a fresh interpreter "
        f"per statement, median of {max(r['round'] for r in imports) + 1} alternating rounds"
        + (' ("before": the --compare tree)' if len(trees) > 1 else "")
        + ". CPU is the interpreter's own user + system time, steadier than wall time on "
        "a shared machine.",
    )
    rows = []
    for label in STATEMENTS:
        for tree in trees:
            m = {k: _median(imports, k, label=label, tree=tree) for k in _IMPORT_KEYS}
            rows.append(
                [f"`{label}`", tree, f"{m['modules']:.0f}", f"{m['wall_ms']:.1f}"]
                + [f"{m['cpu_ms']:.1f}"]
            )
    header = ["statement", "mlserve", "new modules", "wall ms", "CPU ms"]
    lines += table_lines(header, rows, labels=2)
    if serving:
        rounds = max(r["round"] for r in serving) + 1
        rows = [
            [name, f"{_median(serving, 'seconds', server=name):.2f}"]
            + [f"{_median(serving, 'cpu_s', server=name):.2f}"]
            for name in dict.fromkeys(r["server"] for r in serving)
        ]
        lines += [
            "",
            f"From start to the first 200 on `/v2/health/ready` (polled every 50 ms), median "
            f"of {rounds} alternating rounds:",
            "",
            *table_lines(["server", "seconds to ready", "server CPU s by then"], rows),
        ]
    return "\n".join([*lines, "", goals(imports, serving)])


def goals(imports: list[dict[str, Any]], serving: list[dict[str, Any]]) -> str:
    modules = _median(imports, "modules", label="import mlserve", tree="now")
    wall = _median(imports, "wall_ms", label="import mlserve", tree="now")
    lines = [
        "Goals:",
        "",
        f"- `import mlserve` at most {GOAL_MODULES} modules: {modules:.0f}, "
        + ("met" if modules <= GOAL_MODULES else "not met"),
        f"- `import mlserve` at most {GOAL_MS:.0f} ms: {wall:.1f} ms, "
        + ("met" if wall <= GOAL_MS else "not met"),
    ]
    names = {r["server"] for r in serving}
    if {"mlserve echo", "MLServer echo"} <= names:
        ours = _median(serving, "seconds", server="mlserve echo")
        theirs = _median(serving, "seconds", server="MLServer echo")
        lines.append(
            f"- `mlserve serve` ready sooner than MLServer (echo model): {ours:.2f} s vs "
            f"{theirs:.2f} s ({theirs / ours:.1f}x), " + ("met" if ours < theirs else "not met")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, {"repeat": "import rounds (medians)"}, repeat=7)
    parser.add_argument("--serve-repeat", type=int, default=3, help="serve rounds (medians)")
    parser.add_argument("--compare", default="", help="a folder holding an older mlserve/")
    parser.add_argument("--no-tf", action="store_true", help="skip the TensorFlow model")
    parser.add_argument("--no-mlserver", action="store_true", help="skip MLServer")
    parser.add_argument("--no-serve", action="store_true", help="imports only")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    imports = measure_imports(args)
    serving = [] if args.no_serve else measure_serving(args)
    save_raw("startup", {"args": vars(args), "imports": imports, "serving": serving})
    given = sys.argv[1:] if argv is None else argv
    publish("startup", report(imports, serving, "".join(f" {a}" for a in given)), args)


if __name__ == "__main__":
    main()
