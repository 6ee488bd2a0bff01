"""In-process calls: µs per ``server.test("/v2/models/m/infer", body)`` on the mock
server, mlserve against mlrun 1.12 (in its own virtual environment).

    python -m benchmarks.inprocess [--repeat 3] [--calls 2000] [--no-doc]

Three cases, the same model class, graph and body for both (benchmarks/inprocess_case.py,
which imports either framework): a router with one trivial sync model; an async-engine
flow (``engine="async"``: a step, the router with the model, a step that responds),
which mlserve runs inline; and the same flow with a coroutine first step, which
needs the event loop in both.
Each round runs every (framework, case) in a fresh process, alternating which
framework goes first; the table gives medians over the rounds of wall and CPU µs per
call (CPU: every thread of the process, so a hop to a loop or a pool counts).
Writes the ``inprocess`` section of docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from typing import Any

from benchmarks.common import (
    HERE,
    ROOT,
    arguments,
    ensure_env,
    env_python,
    exit_on_sigterm,
    heading,
    median_of,
    progress,
    publish,
    save_raw,
    table_lines,
    version,
)

CASE = HERE / "inprocess_case.py"
CASES = {
    "router": "router, one sync model",
    "flow": "async-engine flow: two sync steps and the model",
    "async-step": "async-engine flow, its first step async",
}
FRAMEWORKS = ("mlserve", "mlrun")
# Goals: mlserve's µs per call at most this share of mlrun's.
GOALS = {"router": 0.5, "flow": 1.0, "async-step": 1.0}


def run_case(framework: str, case: str, calls: int) -> dict[str, Any]:
    """One (framework, case) in a fresh interpreter: its JSON line."""
    python = env_python(None if framework == "mlserve" else framework)
    done = subprocess.run(
        [python, str(CASE), framework, case, str(calls)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{framework} {case} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for round_ in range(args.repeat):
        order = FRAMEWORKS if round_ % 2 == 0 else FRAMEWORKS[::-1]
        for case in CASES:
            for framework in order:
                progress(f"inprocess: round {round_ + 1}/{args.repeat}, {framework} {case}")
                rows.append({**run_case(framework, case, args.calls), "round": round_})
    return rows


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    stats = {
        (f, c): median_of(
            [r for r in rows if r["framework"] == f and r["case"] == c], "wall_us", "cpu_us"
        )
        for f in FRAMEWORKS
        for c in CASES
    }
    lines = heading(
        "In-process: the mock server against mlrun's",
        f"python -m benchmarks.inprocess --repeat {args.repeat} --calls {args.calls}",
        f"; mlrun {version('mlrun')}. µs per "
        '`server.test("/v2/models/m/infer", {"inputs": [[1.0, 2.0, 3.0, 4.0]]})`, each '
        f"process the median of 5 batches of {args.calls} calls after a warm-up; median of "
        f"{args.repeat} alternating rounds.",
    )
    rows = []
    for case, label in CASES.items():
        ours, peer = stats[("mlserve", case)], stats[("mlrun", case)]
        rows.append(
            [label, f"{ours['wall_us']:.1f}", f"{peer['wall_us']:.1f}", f"{ours['cpu_us']:.1f}"]
            + [f"{peer['cpu_us']:.1f}", f"{ours['cpu_us'] / peer['cpu_us']:.2f}x"]
        )
    header = ["case", "mlserve wall µs", "mlrun wall µs", "mlserve CPU µs", "mlrun CPU µs"]
    lines += table_lines([*header, "mlserve/mlrun (CPU)"], rows)
    lines += ["", "Goals, CPU µs per call:", ""]
    for case, goal in GOALS.items():
        ratio = stats[("mlserve", case)]["cpu_us"] / stats[("mlrun", case)]["cpu_us"]
        lines.append(
            f"- {CASES[case]}: at most {goal:g}x mlrun's: {ratio:.2f}x, "
            + ("met" if ratio <= goal else "not met")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, repeat=3)
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    args = parser.parse_args(argv)
    ensure_env("mlrun")
    exit_on_sigterm()
    rows = measure(args)
    save_raw("inprocess", {"args": vars(args), "runs": rows})
    publish("inprocess", table(rows, args), args)


if __name__ == "__main__":
    main()
