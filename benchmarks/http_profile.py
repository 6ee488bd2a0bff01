"""Where a request's time goes: py-spy samples a real ``mlserve serve`` under wrk.

    python -m benchmarks.http_profile [--seconds 8] [--connections 8] [--form tensor] [--no-doc]

Samples (``py-spy record --gil``: only the thread that holds the GIL, the one doing
Python work) are grouped by the layer of DESIGN.md they fall in, by the innermost
mlserve frame of each sample; the rest (the event loop itself, sockets) is what
every asyncio server pays. Prints the shares and the top functions by own time.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import http_load
from benchmarks.common import arguments, heading, progress, publish, running, table_lines

# The innermost mlserve module of a sample names its layer (first match wins).
LAYERS = [
    ("the HTTP face (parsing, the gate, the response bytes)", ("mlserve/http/",)),
    ("the tensor codec (decode, encode, JSON)", ("mlserve/protocol/",)),
    (
        "the model (hooks, envelope, stats, metrics)",
        ("mlserve/model.py", "mlserve/core/stats.py", "mlserve/monitoring/"),
    ),
    ("the graph (steps, routing)", ("mlserve/graph/",)),
    ("the server (handlers, limits, deadlines, thread hop)", ("mlserve/server/",)),
]


def layer_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, prefixes in LAYERS:
            if any(prefix in frame for prefix in prefixes):
                return name
    return "the event loop, sockets and the rest"


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--form", choices=["tensor", "binary", "rows"], default="tensor")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    form = {"tensor": http_load.TENSOR, "binary": http_load.BINARY, "rows": http_load.ROWS}[
        args.form
    ]
    with (
        running(http_load._mlserve, "profile") as (port, pid, _),
        tempfile.TemporaryDirectory() as tmp,
    ):
        url = f"http://127.0.0.1:{port}{http_load.INFER_PATH}"
        form.load(url, args.connections, 2)  # warm-up: the model's gate has learnt
        raw = Path(tmp) / "samples.txt"
        record = [spy, "record", "--gil", "-r", "250", "-f", "raw", "-o", str(raw)]
        record += ["-d", str(args.seconds + 1), "--pid", str(pid)]
        progress(f"profile: py-spy on pid {pid}, wrk -c{args.connections} for {args.seconds} s")
        spying = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        result = form.load(url, args.connections, args.seconds)
        spying.wait(60)
        lines = raw.read_text().splitlines()
    layers: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rpartition(" ")
        frames, weight = stack.split(";"), int(count)
        total += weight
        layers[layer_of(frames)] += weight
        own[frames[-1].split(" (")[0] + " (" + frames[-1].rsplit("/", 1)[-1]] += weight
    lines = heading(
        "Where an HTTP request's time goes",
        f"python -m benchmarks.http_profile --seconds {args.seconds} --connections "
        f"{args.connections} --form {args.form}",
        f". py-spy (`record --gil`, 250 Hz) on `mlserve serve` of the echo model under "
        f"`wrk -c{args.connections}` ({result['rps']:,.0f} requests/s with py-spy attached, "
        f"{total} samples holding the GIL).",
    )
    lines += table_lines(
        ["where (innermost mlserve frame of a sample)", "share"],
        ([name, f"{weight / total:.0%}"] for name, weight in layers.most_common()),
    )
    lines += [
        "",
        *table_lines(
            ["function (own time)", "share"],
            ([f"`{name}`", f"{weight / total:.1%}"] for name, weight in own.most_common(args.top)),
        ),
    ]
    publish("http-profile", "\n".join(lines), args)


if __name__ == "__main__":
    main()
