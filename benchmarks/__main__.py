"""``make bench``: every benchmark, one after the other, each writing its section of
docs/performance.md.

    python -m benchmarks [--only http_load scale ...] [--quick] [--no-doc]

Each step is a module of this package run with its own defaults (``python -m
benchmarks.<step> --help`` says what they are); ``--quick`` gives every step one short
round, to check the harness end to end (its numbers are not for the document: it
implies ``--no-doc``). The peers' environments (MLServer, KServe, mlrun) are created
under benchmarks/.envs/ on first use. A step that fails is reported and the others
still run; the exit status says whether all passed.
"""

from __future__ import annotations

import importlib
import re
import sys
import traceback

from benchmarks.common import DOC, arguments, heading, progress, table_lines, write_section

# In the order they run: the cheap in-process ones first, the long loads after.
STEPS = [
    "startup",
    "inprocess",
    "http_load",
    "http_profile",
    "rollout",
    "grpc_load",
    "streaming",
    "shared_memory",
    "tracking",
    "tracing",
    "monitoring",
    "console",
    "explain",
    "tf_batching",
    "mnist_protocols",
    "scale",
]

QUICK = {
    "startup": ["--repeat", "1", "--serve-repeat", "1"],
    "inprocess": ["--repeat", "1", "--calls", "200"],
    "http_load": ["--duration", "1", "--warmup", "1", "--repeat", "1"],
    "http_profile": ["--seconds", "2"],
    "rollout": ["--duration", "1", "--warmup", "1", "--repeat", "1", "--calls", "200"]
    + ["--batches", "1", "--rate", "200", "--shadow-rounds", "1"],
    "grpc_load": ["--duration", "1", "--repeat", "1"],
    "streaming": ["--duration", "1", "--warmup", "1", "--repeat", "1", "--ttfc-streams", "20"],
    "shared_memory": ["--calls", "5", "--repeat", "1"],
    "tracking": ["--duration", "1", "--repeat", "1"],
    "tracing": ["--duration", "1", "--warmup", "1", "--repeat", "1", "--no-count"],
    "monitoring": ["--records", "20000", "--duration", "1", "--repeat", "1", "--rate", "500"]
    + ["--drift-window", "2", "--drift-rounds", "1"],
    "console": ["--duration", "1", "--warmup", "1", "--repeat", "1"],
    "explain": ["--repeat", "1", "--calls", "1", "--tree-rows", "1", "--agnostic-rows", "1"],
    "tf_batching": ["--duration", "2", "--repeat", "1"],
    "mnist_protocols": ["--requests", "10", "--duration", "1"],
    "scale": ["--duration", "1", "--warmup", "1", "--repeat", "1", "--models", "1", "10"],
}


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--only", nargs="+", choices=STEPS, help="these steps, in the usual order")
    parser.add_argument("--quick", action="store_true", help="one short round each, no document")
    args = parser.parse_args(argv)
    steps = [step for step in STEPS if not args.only or step in args.only]
    failed = []
    for number, step in enumerate(steps, 1):
        progress(f"step {number}/{len(steps)}: {step}")
        step_argv = QUICK[step] if args.quick else []
        if args.quick or args.no_doc:
            step_argv = [*step_argv, "--no-doc"]
        try:
            importlib.import_module(f"benchmarks.{step}").main(step_argv)
        except (Exception, SystemExit) as exc:
            if isinstance(exc, SystemExit) and not exc.code:
                continue
            traceback.print_exc()
            progress(f"step {step} failed: {exc!r}")
            failed.append(step)
    if not (args.quick or args.no_doc):
        write_section("goals", goals_summary(DOC.read_text()))
    progress("done" + (f"; failed: {', '.join(failed)}" if failed else ", every step passed"))
    return 1 if failed else 0


_SECTION = re.compile(r"<!-- ([\w-]+)-begin -->\n## ([^\n]+)\n(.*?)<!-- \1-end -->", re.S)
_GOAL = re.compile(r"^- (.+): (.+), (met|not met)(?: \(.*\))?$", re.M)


def goals_summary(doc: str) -> str:
    """Every goal line of the generated sections ("- <goal>: <measured>, met"), in one table."""
    rows = [
        [title, *goal]
        for key, title, body in _SECTION.findall(doc)
        if key != "goals"
        for goal in _GOAL.findall(body)
    ]
    lines = heading(
        "The goals, as last measured",
        "python -m benchmarks",
        ". Collected from the sections below, each measured on the machine it names.",
    )
    return "\n".join([*lines, *table_lines(["section", "goal", "measured", ""], rows, labels=4)])


if __name__ == "__main__":
    sys.exit(main())
