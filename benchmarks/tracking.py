"""Throughput with tracking on, as a ratio of tracking off (goal: >= 0.85).

Serves one small model over real HTTP (``python -m mlserve serve``) interleaved
rounds (default 3): tracking off, tracking to a file, tracking to Kafka (a local tansu
broker); loads each with wrk (POST, keep-alive) and prints requests/second
and the ratio to tracking off (medians of the rounds).

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

FUNCTION = '''
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
'''

LUA = '''
wrk.method = "POST"
wrk.body = '{"inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]}'
wrk.headers["Content-Type"] = "application/json"
'''


def measure(stream: str, seconds: int, connections: int, workdir: Path) -> float:
    port = free_port()
    env = {**os.environ, "BENCH_STREAM": stream, "MLSERVE_DATA_DIR": str(workdir / "data")}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlserve", "serve", str(workdir / "fn.py"), "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=60, proc=server)
        url = f"http://127.0.0.1:{port}/v2/models/m/infer"
        wrk = ["wrk", "-t1", f"-c{connections}", "-s", str(workdir / "post.lua"), url]
        subprocess.run([*wrk[:1], "-d2s", *wrk[1:]], capture_output=True, check=True)  # warm-up
        out = subprocess.run([*wrk[:1], f"-d{seconds}s", *wrk[1:]], capture_output=True,
                             text=True, check=True).stdout
        match = re.search(r"Requests/sec:\s+([\d.]+)", out)
        if match is None or "Non-2xx" in out:
            raise RuntimeError(f"wrk failed:\n{out}")
        return float(match.group(1))
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
            configs = {"off": "", "file": str(workdir / "logs.jsonl"),
                       "kafka": f"kafka://{broker.url}?topic=bench"}
            runs: dict[str, list[float]] = {name: [] for name in configs}
            for _ in range(args.rounds):
                for name, stream in configs.items():
                    runs[name].append(measure(stream, args.seconds, args.connections, workdir))
                    time.sleep(1)
    finally:
        broker.stop()
    medians = {name: statistics.median(rates) for name, rates in runs.items()}
    print(f"{'tracking':<10}{'median req/s':>14}{'ratio':>8}   runs")
    for name, rate in medians.items():
        each = " ".join(f"{r:.0f}" for r in runs[name])
        print(f"{name:<10}{rate:>14.0f}{rate / medians['off']:>8.2f}   {each}")


if __name__ == "__main__":
    main()
