"""HTTP load on loopback: mlserve against MLServer, KServe and a bare ASGI floor.

    python -m benchmarks.http_load [--duration 5] [--repeat 3] [--connections 1 8 64]
    python -m benchmarks.http_load --servers mlserve floor --no-doc
    python -m benchmarks.http_load --servers mlserve floor --baseline main --no-doc

Each server serves the same echo model (a [1, 4] FP32 tensor in, the same out)
with one process, and runs alone while ``wrk`` drives it: the machine has few
cores and the load generator shares them. Rounds alternate the servers, and the
table gives the median of the rounds. The request forms: V2 JSON ``tensor``,
tritonclient's ``binary`` form (raw bytes after a JSON header) and mlrun's
``rows``. The peers live in benchmarks/.envs/, created on first use. ``--baseline REF``
also serves mlserve as of a git commit in the same rounds (the A/B of a change).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVS,
    HERE,
    ab_lines,
    arguments,
    baseline_tree,
    command_line,
    cpu_seconds,
    ensure_env,
    exit_on_sigterm,
    free_port,
    from_tree,
    grouped,
    heading,
    median_of,
    progress,
    publish,
    running,
    save_raw,
    table_lines,
    version,
    wrk,
)

INFER_PATH = "/v2/models/echo/infer"
VALUES = [1.0, 2.0, 3.0, 4.0]


@dataclass(frozen=True)
class Form:
    """One way to send the same [1, 4] FP32 tensor."""

    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    def load(self, url: str, connections: int, duration: float) -> dict[str, Any]:
        """wrk sending this form to ``url``."""
        return wrk(url, self.body, connections, duration, self.content_type, dict(self.headers))


def _binary() -> Form:
    """tritonclient's default: a JSON header, then the raw tensor bytes; output raw too."""
    header = {
        "inputs": [
            {
                "name": "input-0",
                "shape": [1, 4],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 16},
            }
        ],
        "outputs": [{"name": "output-0", "parameters": {"binary_data": True}}],
    }
    head = json.dumps(header).encode()
    body = head + struct.pack("<4f", *VALUES)
    return Form(
        body, "application/octet-stream", (("Inference-Header-Content-Length", str(len(head))),)
    )


TENSOR = Form(
    json.dumps(
        {"inputs": [{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": VALUES}]}
    ).encode()
)
ROWS = Form(json.dumps({"inputs": [VALUES]}).encode())
BINARY = _binary()


@dataclass
class Server:
    """How to start one server, and the request forms measured on it."""

    name: str
    forms: dict[str, Form]
    command: Callable[[int, Path], list[str]]
    env: str | None = None  # the peer environment, None for this interpreter


def _floor(port: int, workdir: Path) -> list[str]:
    return [sys.executable, str(HERE / "servers" / "floor.py"), str(port)]


def _mlserve(port: int, workdir: Path) -> list[str]:
    model = str(HERE / "servers" / "mlserve_model.py")
    return [sys.executable, "-m", "mlserve", "serve", model, "--port", str(port)]


def mlserver_start(
    workdir: Path,
    http_port: int,
    grpc_port: int,
    source: str = "mlserver_model.py",
    model: tuple[str, str] = ("echo", "mlserver_model.Echo"),
) -> list[str]:
    """``mlserver start`` of a folder serving ``model`` (name, class) of
    benchmarks/servers/``source`` (default: the echo model) on these ports. One process:
    parallel_workers=0 runs inference in the server process (no IPC hop)."""
    (workdir / source).write_text((HERE / "servers" / source).read_text())
    settings = {
        "debug": False,
        "host": "127.0.0.1",
        "http_port": http_port,
        "grpc_port": grpc_port,
        "metrics_port": free_port(),
        "parallel_workers": 0,
    }
    (workdir / "settings.json").write_text(json.dumps(settings))
    model_settings = {"name": model[0], "implementation": model[1]}
    (workdir / "model-settings.json").write_text(json.dumps(model_settings))
    return [str(ENVS / "mlserver" / "bin" / "mlserver"), "start", str(workdir)]


def _baseline(tree: Path, port: int, workdir: Path) -> list[str]:
    return from_tree(tree, _mlserve(port, workdir))


def _mlserver(port: int, workdir: Path) -> list[str]:
    return mlserver_start(workdir, http_port=port, grpc_port=free_port())


def _kserve(port: int, workdir: Path) -> list[str]:
    script = str(HERE / "servers" / "kserve_model.py")
    return [str(ENVS / "kserve" / "bin" / "python"), script, "--http_port", str(port)]


# What mlserve (and a --baseline of it) is measured with; the peers take the tensor form.
MLSERVE_FORMS = {"tensor": TENSOR, "binary": BINARY, "rows": ROWS}
SERVERS = [
    Server("floor", {"tensor": TENSOR}, _floor),
    Server("mlserve", MLSERVE_FORMS, _mlserve),
    Server("MLServer", {"tensor": TENSOR}, _mlserver, env="mlserver"),
    Server("KServe", {"tensor": TENSOR}, _kserve, env="kserve"),
]


def check_answer(url: str, form: Form) -> None:
    """One request before the load: the server must echo the tensor (or rows)."""
    headers = {"Content-Type": form.content_type, **dict(form.headers)}
    request = urllib.request.Request(url, data=form.body, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as answer:
        length = answer.headers.get("Inference-Header-Content-Length")
        raw = answer.read()
    if length is not None:
        data = list(struct.unpack("<4f", raw[int(length) :]))
    else:
        outputs = json.loads(raw)["outputs"]
        data = outputs[0] if form is ROWS else outputs[0]["data"]
    if [float(x) for x in data] != VALUES:
        raise RuntimeError(f"{url} answered {raw[:300]!r}")


def measure(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with running(server.command, server.name) as (port, pid, _):
        url = f"http://127.0.0.1:{port}{INFER_PATH}"
        for name, form in server.forms.items():
            check_answer(url, form)
            form.load(url, 8, args.warmup)
            for connections in args.connections:
                cpu = cpu_seconds(pid)
                result = form.load(url, connections, args.duration)
                result["cpu_us"] = (cpu_seconds(pid) - cpu) / result["requests"] * 1e6
                bad = sum(result["errors"].values())
                progress(
                    f"http {server.name:8} {name:6} c={connections:<3} {result['rps']:8.0f} req/s"
                    f"  p50 {result['p50_us'] / 1e3:5.2f} ms  p99 {result['p99_us'] / 1e3:6.2f} ms"
                    + (f"  ERRORS {result['errors']}" if bad else "")
                )
                rows.append(
                    {"server": server.name, "form": name, "connections": connections, **result}
                )
    return rows


Stats = dict[tuple[str, str, int], dict[str, float]]


def medians(rows: list[dict[str, Any]]) -> Stats:
    """Per (server, form, connections): the median over the rounds."""
    groups = grouped(rows, "server", "form", "connections")
    return {
        key: median_of(group, "rps", "p50_us", "p99_us", "cpu_us") for key, group in groups.items()
    }


LOAD_HEADER = ["server", "body", "connections", "requests/s", "p50 ms", "p99 ms"]


def load_rows(stats: Stats) -> list[list[str]]:
    """The cells of ``LOAD_HEADER`` (grpc_load's table too) and server CPU per request."""
    return [
        [name, form, str(conns), f"{s['rps']:,.0f}", f"{s['p50_us'] / 1000:.2f}"]
        + [f"{s['p99_us'] / 1000:.2f}", f"{s['cpu_us']:.0f}"]
        for (name, form, conns), s in stats.items()
    ]


def table(stats: Stats, args: argparse.Namespace) -> str:
    peers = f"MLServer {version('mlserver')}, KServe {version('kserve')}"
    lines = heading(
        "HTTP: mlserve, MLServer, KServe and the floor",
        command_line(
            "http_load",
            args,
            {"connections": [1, 8, 64], "servers": [s.name for s in SERVERS], "baseline": None},
        ),
        f"; {peers}; {args.duration:g} s per point after a {args.warmup:g} s warm-up, "
        f"median of {args.repeat} alternating round(s).",
    )
    lines += table_lines([*LOAD_HEADER, "server CPU us/request"], load_rows(stats), labels=2)
    ratios = []
    for conns in args.connections:
        ours = stats.get(("mlserve", "tensor", conns))
        others = {n: stats.get((n, "tensor", conns)) for n in ("MLServer", "KServe", "floor")}
        if ours is None or None in others.values():
            continue
        ratio = {n: ours["rps"] / p["rps"] for n, p in others.items() if p}
        peer_p99 = others["MLServer"]["p99_us"]  # type: ignore[index]
        ratios.append(
            [conns, f"{ratio['MLServer']:.2f}x", f"{ratio['KServe']:.2f}x", f"{ratio['floor']:.0%}"]
            + [f"{ours['p99_us'] / 1000:.2f} vs {peer_p99 / 1000:.2f}"]
        )
    header = ["connections", "mlserve/MLServer req/s", "mlserve/KServe req/s"]
    header += ["mlserve/floor req/s", "p99 mlserve vs MLServer (ms)"]
    lines += ["", *table_lines(header, ratios, labels=0)]
    lines += ab_lines(stats, args.baseline)
    return "\n".join([*lines, "", goals(stats)])


def goals(stats: Stats) -> str:
    ours, peer, floor = (stats.get((n, "tensor", 8)) for n in ("mlserve", "MLServer", "floor"))
    if not (ours and peer and floor):
        return "Goals not evaluated: 8 connections was not measured for every server."
    speed, share = ours["rps"] / peer["rps"], ours["rps"] / floor["rps"]
    lower = ours["p99_us"] < peer["p99_us"]
    return "\n".join(
        [
            "Goals, tensor body at 8 connections:",
            "",
            f"- at least 8x MLServer's requests/s: {speed:.2f}x, "
            + ("met" if speed >= 8 else "not met"),
            f"- a lower p99 than MLServer's: {ours['p99_us'] / 1000:.2f} ms vs "
            f"{peer['p99_us'] / 1000:.2f} ms, " + ("met" if lower else "not met"),
            f"- at least 65% of the bare ASGI floor: {share:.0%}, "
            + ("met" if share >= 0.65 else "not met"),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0, warmup=2.0, repeat=3)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--servers", nargs="+", default=[s.name for s in SERVERS])
    parser.add_argument(
        "--baseline", metavar="GIT_REF", help="also measure mlserve as of this commit (A/B)"
    )
    args = parser.parse_args(argv)
    servers = [s for s in SERVERS if s.name in args.servers]
    for env in sorted({s.env for s in servers if s.env}):
        ensure_env(env)
    exit_on_sigterm()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        if args.baseline:
            tree = baseline_tree(args.baseline, Path(tmp))
            command = partial(_baseline, tree)
            servers.insert(0, Server(f"mlserve@{args.baseline}", MLSERVE_FORMS, command))
        for round_ in range(args.repeat):
            progress(f"http: round {round_ + 1}/{args.repeat}")
            for server in servers:
                rows += [{**row, "round": round_} for row in measure(server, args)]
    save_raw("http", {"args": vars(args), "runs": rows})
    publish("http", table(medians(rows), args), args)


if __name__ == "__main__":
    main()
