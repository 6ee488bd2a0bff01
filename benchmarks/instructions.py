"""Instructions per request, counted by valgrind's callgrind: an A/B for small cuts.

    python -m benchmarks.instructions [--case http binary grpc mock tracking] [--requests 1000]
        [--mlrun]

Wall and CPU clocks swing with the machine's load (2 cores shared with every other
process); the number of instructions a request executes does not (within about 0.3%
from run to run here). Each case runs twice under callgrind, with the same warm-up
and then 200 or 200 + ``--requests`` requests; the difference, divided by
``--requests``, is one request (start-up and warm-up cancel out). Slow (valgrind runs
Python some 50 times slower: about a minute per case), so it measures cuts, not
servers: ``make bench`` does that.

- ``http``: the HTTP/1.1 protocol fed request bytes in-process
  (``benchmarks.hotpath``), 8 clients, the echo model on the event loop (its gate set
  inline, where a served model goes after its first 40 calls).
- ``binary``: the same with tritonclient's default request (``benchmarks.http_load``'s
  binary form: a JSON header naming the output, the tensor's raw bytes after it; the
  answer binary too).
- ``grpc``: ``InferenceServicer.ModelInfer`` in-process (``servers/grpc_servicer_cpu``'s
  driver: request parsed, answer serialized), a typed [1, 4] FP32 request, 8 clients,
  the echo model inline.
- ``mock``: ``server.test("/v2/models/m/infer", body)`` of ``inprocess_case``'s router;
  ``--mlrun`` also counts mlrun's mock server (its environment under benchmarks/.envs).
- ``tracking``: the HTTP case with ``benchmarks.tracking``'s model and request (rows),
  tracking off and on (a JSON-lines file stream, endpoint records in memory): the
  instructions model monitoring adds to a request, the stream's sender thread included.

Each run freezes what its warm-up left alive out of the collector's sight (as
``mlserve serve`` does once started), so a full collection landing among the counted
requests walks only their objects.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import ENVS, env_python, progress

HERE = Path(__file__).resolve().parent
WARMUP = 200
_COLLECTED = re.compile(r"Collected : (\d+)")

# The mock case, run by any interpreter (mlrun's has no mlserve): inprocess_case builds it.
_MOCK = (
    "import sys; sys.path.insert(0, {here!r}); import inprocess_case as case; "
    "server = case.build({framework!r}, 'router'); "
    "[server.test(case.PATH, case.BODY) for _ in range({warmup})]; "
    "import gc; gc.collect(); gc.freeze(); "
    "[server.test(case.PATH, case.BODY) for _ in range({count})]"
)


def _inline(server: Any) -> None:
    from mlserve.core.gate import gate_of
    from mlserve.core.limits import limits_of

    model = next(server.iter_models())
    gate = gate_of(model, limits_of(model.context))
    gate.inline, gate._learnt = True, True  # as after 40 cheap calls, however slow valgrind is


def _frozen() -> None:
    gc.collect()
    gc.freeze()


def _http(count: int, server: Any = None, request: bytes | None = None) -> None:
    """``count`` requests through the HTTP protocol, after the gate's warm-up."""
    import uvloop

    from benchmarks import hotpath

    server = server or hotpath.echo_server()
    request = request or hotpath.REQUEST
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(hotpath._round("protocol", server, 80, 8, request))
        _inline(server)
        runner.run(hotpath._round("protocol", server, 80, 8, request))
        _frozen()
        runner.run(hotpath._round("protocol", server, count, 8, request))


def _binary(count: int) -> None:
    """``_http`` with tritonclient's binary request."""
    from benchmarks import hotpath
    from benchmarks.http_load import BINARY

    request = hotpath.http_request(
        hotpath.PATH, BINARY.body, BINARY.content_type.encode(), BINARY.headers
    )
    _http(count, request=request)


def _tracking(count: int, stream: str) -> None:
    """The HTTP case with benchmarks.tracking's model, tracking to file ``stream`` (or off)."""
    from benchmarks import hotpath
    from benchmarks.servers.tracking_model import BODY, tracked_function

    request = hotpath.http_request(b"/v2/models/m/infer", BODY)
    server = hotpath.initialised(tracked_function("" if stream == "off" else stream))
    _http(count, server, request)
    server.wait_for_completion()  # the sender's writes are counted too


def _grpc(count: int) -> None:
    """``count`` typed ModelInfer calls through the V2 servicer, after the gate's warm-up."""
    import uvloop

    from benchmarks import hotpath
    from benchmarks.servers import grpc_servicer_cpu
    from mlserve.grpc.service import InferenceServicer

    servicer = InferenceServicer(hotpath.echo_server())
    body = grpc_servicer_cpu._request("typed")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(grpc_servicer_cpu._round(servicer, body, 80))
        _inline(servicer.server)
        runner.run(grpc_servicer_cpu._round(servicer, body, 80))
        _frozen()
        runner.run(grpc_servicer_cpu._round(servicer, body, count))


def _collected(command: list[str]) -> int:
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run([*valgrind, *command], capture_output=True, text=True, check=True)
    return int(_COLLECTED.findall(done.stderr)[-1])


def _command(case: str, framework: str, count: int) -> list[str]:
    child = [sys.executable, "-m", "benchmarks.instructions", f"--run-{case}", str(count)]
    if case in ("http", "binary", "grpc"):
        return child
    if case == "tracking":
        return [*child, "--stream", framework]
    code = _MOCK.format(here=str(HERE), framework=framework, count=count, warmup=80)
    return [env_python(None if framework == "mlserve" else framework), "-c", code]


def per_request(case: str, framework: str, requests: int) -> float:
    """Instructions of one request of ``case`` (``framework``: mlserve or mlrun; for
    ``tracking``, the stream: off or file)."""
    base = _run(case, framework, WARMUP)
    more = _run(case, framework, WARMUP + requests)
    return (more - base) / requests


def _run(case: str, framework: str, count: int) -> int:
    """One callgrind count; a file stream is checked for a record per request (here,
    outside the count)."""
    if case != "tracking" or framework == "off":
        return _collected(_command(case, framework, count))
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        path = Path(tmp) / "model-logs.jsonl"
        collected = _collected(_command(case, str(path), count))
        records = path.read_bytes().count(b"\n")
    if records != count + 160:  # the two warm-ups' requests are logged too
        raise RuntimeError(f"{count + 160} tracked requests, {records} records")
    return collected


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--case",
        nargs="+",
        choices=["http", "binary", "grpc", "mock", "tracking"],
        default=["http", "mock"],
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--mlrun", action="store_true", help="also count mlrun's mock server")
    parser.add_argument("--run-http", type=int, help=argparse.SUPPRESS)  # the child of `http`
    parser.add_argument("--run-binary", type=int, help=argparse.SUPPRESS)  # of `binary`
    parser.add_argument("--run-grpc", type=int, help=argparse.SUPPRESS)  # the child of `grpc`
    parser.add_argument("--run-tracking", type=int, help=argparse.SUPPRESS)  # of `tracking`
    parser.add_argument("--stream", help=argparse.SUPPRESS)  # off, or the file to log to
    args = parser.parse_args(argv)
    if args.run_http is not None:
        _http(args.run_http)
        return
    if args.run_binary is not None:
        _binary(args.run_binary)
        return
    if args.run_grpc is not None:
        _grpc(args.run_grpc)
        return
    if args.run_tracking is not None:
        _tracking(args.run_tracking, args.stream)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed: apt-get install valgrind")
    runs = [(case, "mlserve") for case in args.case if case != "tracking"]
    if args.mlrun and "mock" in args.case:
        if not (ENVS / "mlrun").exists():
            raise SystemExit("no mlrun environment: python -m benchmarks.inprocess creates it")
        runs.append(("mock", "mlrun"))
    if "tracking" in args.case:
        runs += [("tracking", "off"), ("tracking", "file")]
    counts = {}
    for case, framework in runs:
        progress(f"instructions: {case} ({framework}), two callgrind runs")
        count = counts[case, framework] = per_request(case, framework, args.requests)
        print(f"{case:8} {framework:8} {count:10,.0f} instructions per request")
    if "tracking" in args.case:
        extra = counts["tracking", "file"] / counts["tracking", "off"] - 1
        print(f"tracking to a file adds {extra:.1%} to a request's instructions")


if __name__ == "__main__":
    main()
