"""Throughput with tracking on, as a ratio of tracking off (goal: >= 0.85).

Serves one small model over real HTTP (``python -m mlserve serve``) interleaved
rounds (default 3): tracking off, tracking to a file, tracking to Kafka (a local tansu
broker); loads each with wrk (POST, keep-alive) and prints requests/second
and the ratio to tracking off (medians of the rounds), and the server's CPU
per request (``cpu ratio`` = CPU per request off / on: the throughput ratio a
CPU-bound server would reach, which moves less when other jobs share the
machine).

    python benchmarks/tracking.py [--seconds 10] [--connections 16]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.services import free_port, start_kafka, wait_for_port  # noqa: E402

FUNCTION = """
import os
import mlserve
from mlserve.model import V2ModelServer


class Sum(V2ModelServer):
    def load(self):
        self.model = sum

    def predict(self, request):
        return [sum(row) for row in request["inputs"]]


fn = mlserve.new_function("bench", project="bench")
fn.add_model("m", class_name=Sum)
fn.spec.parameters["endpoint_store_url"] = "memory://"
stream = os.environ.get("BENCH_STREAM")
if stream:
    fn.set_tracking(stream)
"""

LUA = """
wrk.method = "POST"
wrk.body = '{"inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]}'
wrk.headers["Content-Type"] = "application/json"
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (all its threads, librdkafka's included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(stream: str, seconds: int, connections: int, workdir: Path) -> tuple[float, float]:
    """Requests/second, and the server's CPU microseconds per request."""
    port = free_port()
    env = {**os.environ, "BENCH_STREAM": stream, "MLSERVE_DATA_DIR": str(workdir / "data")}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlserve", "serve", str(workdir / "fn.py"), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=60, proc=server)
        url = f"http://127.0.0.1:{port}/v2/models/m/infer"
        wrk = ["wrk", "-t1", f"-c{connections}", "-s", str(workdir / "post.lua"), url]
        subprocess.run([*wrk[:1], "-d2s", *wrk[1:]], capture_output=True, check=True)  # warm-up
        cpu = cpu_seconds(server.pid)
        out = subprocess.run(
            [*wrk[:1], f"-d{seconds}s", *wrk[1:]], capture_output=True, text=True, check=True
        ).stdout
        cpu = cpu_seconds(server.pid) - cpu
        rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
        total = re.search(r"(\d+) requests in", out)
        if rate is None or total is None or "Non-2xx" in out:
            raise RuntimeError(f"wrk failed:\n{out}")
        return float(rate.group(1)), cpu * 1e6 / int(total.group(1))
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; median of each")
    args = parser.parse_args()
    broker = start_kafka()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = Path(tmp)
            (workdir / "fn.py").write_text(FUNCTION)
            (workdir / "post.lua").write_text(LUA)
            configs = {
                "off": "",
                "file": str(workdir / "logs.jsonl"),
                "kafka": f"kafka://{broker.url}?topic=bench",
            }
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
            for _ in range(args.rounds):
                for name, stream in configs.items():
                    runs[name].append(measure(stream, args.seconds, args.connections, workdir))
                    time.sleep(1)
    finally:
        broker.stop()
    report(runs)


def report(runs: dict[str, list[tuple[float, float]]]) -> None:
    """Medians of throughput and of CPU per request; the CPU ratio moves less with other load."""
    rates = {name: statistics.median(r for r, _ in each) for name, each in runs.items()}
    cpus = {name: statistics.median(c for _, c in each) for name, each in runs.items()}
    print(f"{'tracking':<10}{'req/s':>8}{'ratio':>7}{'cpu us/req':>12}{'cpu ratio':>11}   runs")
    for name, each in runs.items():
        listed = " ".join(f"{r:.0f}" for r, _ in each)
        print(
            f"{name:<10}{rates[name]:>8.0f}{rates[name] / rates['off']:>7.2f}"
            f"{cpus[name]:>12.1f}{cpus['off'] / cpus[name]:>11.2f}   {listed}"
        )


if __name__ == "__main__":
    main()
