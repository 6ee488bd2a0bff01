"""TensorFlow benchmark: a Keras MLP (32 -> 64 -> 64 -> 10) under wrk at 64 connections.

Runs, one after the other on 127.0.0.1:
- mlserve (``python -m mlserve serve``) with adaptive batching off, then on;
- MLServer serving the same SavedModel through a custom runtime (in its own
  venv, ``benchmarks/.envs/mlserver``, created when missing), without and
  with its adaptive batching.

Each case gets a warm-up run, then a measured wrk run (V2 JSON request of one
row). With ``--rounds N`` the cases run N times, interleaved (off, on, off,
on, ...), and the table shows each figure's median; the load average is
recorded before every round. Prints a Markdown table and, with ``--write``,
puts it into ``docs/performance.md`` between the ``tf-begin`` / ``tf-end``
markers.

    python -m benchmarks.tf_batching [--duration 15] [--rounds 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "benchmarks" / "results" / "tf"
MLSERVER_ENV = ROOT / "benchmarks" / ".envs" / "mlserver"
CONNECTIONS = 64
MAX_BATCH_SIZE = 64
BEGIN, END = "<!-- tf-begin -->", "<!-- tf-end -->"

BODY = {"inputs": [{"name": "inputs", "datatype": "FP32", "shape": [1, 32], "data": [0.5] * 32}]}

MLSERVER_RUNTIME = """
import tensorflow as tf
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class TFRuntime(MLModel):
    async def load(self) -> bool:
        uri = self.settings.parameters.uri
        self._signature = tf.saved_model.load(uri).signatures["serving_default"]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0])
        y = self._signature(inputs=tf.constant(x, tf.float32))["output_0"].numpy()
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output("output_0", y)])
"""


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def save_model() -> Path:
    """The MLP as version 1 of ``WORK/mlp`` (saved once)."""
    folder = WORK / "mlp" / "1"
    if not (folder / "saved_model.pb").is_file():
        import keras
        import tensorflow as tf

        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((32,)),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        tf.saved_model.save(model, str(folder))
    return folder


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wrk(url: str, duration: int) -> dict[str, float]:
    script = WORK / "post.lua"
    script.write_text(
        textwrap.dedent(f"""\
        wrk.method = "POST"
        wrk.headers["Content-Type"] = "application/json"
        wrk.body = '{json.dumps(BODY)}'
        """)
    )
    out = subprocess.run(
        ["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{duration}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": rps,
        "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan"),
        "errors": float(errors.group(1)) if errors else 0.0,
    }


def run_mlserve(model: Path, batching: bool, duration: int) -> dict[str, float]:
    port = free_port()
    params = f", max_batch_size={MAX_BATCH_SIZE}, max_batch_time=0.001" if batching else ""
    target = WORK / ("serve_batched.py" if batching else "serve_plain.py")
    target.write_text(
        textwrap.dedent(f"""\
        import mlserve
        fn = mlserve.new_function("tfbench")
        fn.add_model("mlp", model_path={str(model)!r},
                     class_name="mlserve.frameworks.tensorflow.TFModelServer"{params})
        """)
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlserve", "serve", str(target), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return _measure(proc, f"http://127.0.0.1:{port}", duration)


def ensure_mlserver_env() -> Path:
    python = MLSERVER_ENV / "bin" / "python"
    if not python.exists():
        subprocess.run(["python3.11", "-m", "venv", str(MLSERVER_ENV)], check=True)
    check = subprocess.run([str(python), "-c", "import mlserver, tensorflow"], capture_output=True)
    if check.returncode != 0:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "mlserver", "tensorflow-cpu==2.21.*"],
            check=True,
        )
    return MLSERVER_ENV / "bin" / "mlserver"


def run_mlserver(model: Path, batching: bool, duration: int) -> dict[str, float]:
    mlserver = ensure_mlserver_env()
    folder = WORK / ("mlserver_batched" if batching else "mlserver_plain")
    (folder / "mlp").mkdir(parents=True, exist_ok=True)
    (folder / "tf_runtime.py").write_text(MLSERVER_RUNTIME)
    port = free_port()
    settings = {
        "http_port": port,
        "grpc_port": free_port(),
        "metrics_port": free_port(),
        "host": "127.0.0.1",
        # one process, as benchmarks/http_load.py does: MLServer 1.7.1's worker pool
        # fails to start under the uvloop installed beside it
        "parallel_workers": 0,
    }
    (folder / "settings.json").write_text(json.dumps(settings))
    model_settings: dict[str, object] = {
        "name": "mlp",
        "implementation": "tf_runtime.TFRuntime",
        "parameters": {"uri": str(model)},
    }
    if batching:
        model_settings.update(max_batch_size=MAX_BATCH_SIZE, max_batch_time=0.001)
    (folder / "mlp" / "model-settings.json").write_text(json.dumps(model_settings))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(folder)}
    proc = subprocess.Popen(
        [str(mlserver), "start", str(folder)],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return _measure(proc, f"http://127.0.0.1:{port}", duration)


def _measure(proc: subprocess.Popen[bytes], base: str, duration: int) -> dict[str, float]:
    try:
        wait_ready(f"{base}/v2/models/mlp/ready", proc)
        wrk(f"{base}/v2/models/mlp/infer", max(3, duration // 3))  # warm-up
        return wrk(f"{base}/v2/models/mlp/infer", duration)
    finally:
        stop(proc)


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| server | batching | requests/s | p99 (ms) | non-2xx |", "|---|---|---:|---:|---:|"]
    for name, result in results.items():
        server, _, mode = name.partition(" / ")
        lines.append(
            f"| {server} | {mode} | {result['rps']:,.0f} | {result['p99_ms']:.1f} | "
            f"{result['errors']:.0f} |"
        )
    base = results.get("mlserve / off")
    batched = results.get("mlserve / on")
    if base and batched:
        lines.append(
            f"\nBatching on vs off (mlserve): **{batched['rps'] / base['rps']:.1f}x** throughput."
        )
    return "\n".join(lines)


def write_docs(text: str, duration: int, loads: list[float]) -> None:
    path = ROOT / "docs" / "performance.md"
    section = (
        f"{BEGIN}\n## TensorFlow\n\nKeras MLP 32 -> 64 -> 64 -> 10 (SavedModel), one-row V2 JSON "
        f"requests, `wrk -t2 -c{CONNECTIONS} -d{duration}s` on 127.0.0.1, server and load "
        f"generator on the same {os.cpu_count()}-core machine; batching is "
        f"`max_batch_size={MAX_BATCH_SIZE}, max_batch_time=0.001`. "
        f"MLServer {_mlserver_version()} serves the same SavedModel through a custom runtime "
        f"(`benchmarks/tf_batching.py --rounds {len(loads)}`). Medians of "
        f"{len(loads)} interleaved rounds (off, on, MLServer off, on, then again); "
        "1-minute load average before each round (other jobs on the machine raise it): "
        f"{', '.join(f'{load:.2f}' for load in loads)}.\n\n"
        f"{text}\n{END}"
    )
    current = path.read_text() if path.exists() else "# Performance\n"
    if BEGIN in current and END in current:
        current = (
            current[: current.index(BEGIN)] + section + current[current.index(END) + len(END) :]
        )
    else:
        current = current.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(exist_ok=True)
    path.write_text(current)


def _mlserver_version() -> str:
    python = MLSERVER_ENV / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", "import mlserver; print(mlserver.__version__)"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def run_round(model: Path, duration: int, with_mlserver: bool) -> dict[str, dict[str, float]]:
    """Every case once, batching off then on for each server."""
    results = {
        "mlserve / off": run_mlserve(model, False, duration),
        "mlserve / on": run_mlserve(model, True, duration),
    }
    if with_mlserver:
        results["MLServer / off"] = run_mlserver(model, False, duration)
        results["MLServer / on"] = run_mlserver(model, True, duration)
    return results


def medians(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each case's figures, the median over the rounds."""
    return {
        case: {key: statistics.median(r[case][key] for r in rounds) for key in rounds[0][case]}
        for case in rounds[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; medians shown")
    parser.add_argument("--write", action="store_true", help="write docs/performance.md")
    parser.add_argument("--skip-mlserver", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    WORK.mkdir(parents=True, exist_ok=True)
    model = save_model()
    rounds, loads = [], []
    for number in range(args.rounds):
        loads.append(os.getloadavg()[0])
        rounds.append(run_round(model, args.duration, not args.skip_mlserver))
        print(f"round {number + 1} (load {loads[-1]:.2f}):\n{table(rounds[-1])}\n", flush=True)
    text = table(medians(rounds))
    print(text)
    if args.write:
        write_docs(text, args.duration, loads)


if __name__ == "__main__":
    main()
