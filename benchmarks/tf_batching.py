"""TensorFlow: a Keras MLP (32 -> 64 -> 64 -> 10) under wrk at 64 connections, batching
off and on, in mlserve and in MLServer (the same SavedModel through a custom runtime).

    python -m benchmarks.tf_batching [--duration 10] [--repeat 3] [--no-doc]

Rounds alternate the cases (mlserve off, on, MLServer off, on, then again); each case
gets a warm-up run, then a measured one (a V2 JSON request of one row). The table
shows the median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ENVS,
    RESULTS,
    arguments,
    ensure_package,
    exit_on_sigterm,
    free_port,
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

WORK = RESULTS / "tf"
CONNECTIONS = 64
MAX_BATCH_SIZE = 64
BODY = {"inputs": [{"name": "inputs", "datatype": "FP32", "shape": [1, 32], "data": [0.5] * 32}]}
INFER_PATH = "/v2/models/mlp/infer"
READY_PATH = "/v2/models/mlp/ready"

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

MLSERVE_FUNCTION = """
import mlserve
fn = mlserve.new_function("tfbench")
fn.add_model("mlp", model_path={model!r},
             class_name="mlserve.frameworks.tensorflow.TFModelServer"{batching})
"""


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


def mlserve_command(model: Path, batching: bool) -> Callable[[int, Path], list[str]]:
    """``mlserve serve`` of a function file serving the SavedModel (batching on or off)."""

    def command(port: int, workdir: Path) -> list[str]:
        params = f", max_batch_size={MAX_BATCH_SIZE}, max_batch_time=0.001" if batching else ""
        target = workdir / "serve_mlp.py"
        target.write_text(MLSERVE_FUNCTION.format(model=str(model), batching=params))
        return [sys.executable, "-m", "mlserve", "serve", str(target), "--port", str(port)]

    return command


def mlserver_command(model: Path, batching: bool) -> Callable[[int, Path], list[str]]:
    """``mlserver start`` of a folder with the TF runtime: one process (parallel_workers 0,
    as benchmarks/http_load.py runs it)."""

    def command(port: int, workdir: Path) -> list[str]:
        (workdir / "mlp").mkdir()
        (workdir / "tf_runtime.py").write_text(MLSERVER_RUNTIME)
        settings = {
            "http_port": port,
            "grpc_port": free_port(),
            "metrics_port": free_port(),
            "host": "127.0.0.1",
            "parallel_workers": 0,
        }
        (workdir / "settings.json").write_text(json.dumps(settings))
        model_settings: dict[str, object] = {
            "name": "mlp",
            "implementation": "tf_runtime.TFRuntime",
            "parameters": {"uri": str(model)},
        }
        if batching:
            model_settings.update(max_batch_size=MAX_BATCH_SIZE, max_batch_time=0.001)
        (workdir / "mlp" / "model-settings.json").write_text(json.dumps(model_settings))
        return [str(ENVS / "mlserver" / "bin" / "mlserver"), "start", str(workdir)]

    return command


def ensure_mlserver_tf() -> None:
    """MLServer's environment, with TensorFlow for the custom runtime."""
    ensure_package("mlserver", "tensorflow-cpu==2.21.*", "tensorflow")


def measure(
    name: str, command: Callable[[int, Path], list[str]], duration: float
) -> dict[str, Any]:
    body = json.dumps(BODY).encode()
    with running(command, name, READY_PATH) as (port, _pid, _):
        url = f"http://127.0.0.1:{port}{INFER_PATH}"
        wrk(url, body, CONNECTIONS, max(2.0, duration / 3))  # warm-up
        result = wrk(url, body, CONNECTIONS, duration)
    result["errors_total"] = sum(result["errors"].values())
    progress(
        f"tf {name:18} {result['rps']:8.0f} req/s  p99 {result['p99_us'] / 1000:7.1f} ms"
        + (f"  ERRORS {result['errors']}" if result["errors_total"] else "")
    )
    return result


def table(results: dict[str, dict[str, float]], args: argparse.Namespace) -> str:
    lines = heading(
        "TensorFlow: batching on and off",
        f"python -m benchmarks.tf_batching --duration {args.duration:g} --repeat {args.repeat}",
        f"; MLServer {version('mlserver')}. Keras MLP 32 -> 64 -> 64 -> 10 (SavedModel), "
        f"one-row V2 JSON requests, `wrk -t2 -c{CONNECTIONS}`, {args.duration:g} s per case "
        f"after a warm-up; batching is `max_batch_size={MAX_BATCH_SIZE}, max_batch_time=0.001`; "
        "MLServer serves the same SavedModel through a custom runtime. Median of "
        f"{args.repeat} alternating round(s).",
    )
    rows = []
    for name, result in results.items():
        server, _, mode = name.partition(" / ")
        rows.append(
            [server, mode, f"{result['rps']:,.0f}", f"{result['p99_us'] / 1000:.1f}"]
            + [f"{result['errors_total']:.0f}"]
        )
    header = ["server", "batching", "requests/s", "p99 (ms)", "errors"]
    lines += table_lines(header, rows, labels=2)
    base, batched = results.get("mlserve / off"), results.get("mlserve / on")
    if base and batched:
        ratio = batched["rps"] / base["rps"]
        verdict = "met" if ratio >= 4 else "not met"
        lines += [
            "",
            f"- batching on >= 4x off at {CONNECTIONS} connections: {ratio:.1f}x, {verdict}",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, {"duration": "seconds per case"}, duration=10.0, repeat=3)
    parser.add_argument("--skip-mlserver", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    exit_on_sigterm()
    model = save_model()
    cases = {
        "mlserve / off": mlserve_command(model, False),
        "mlserve / on": mlserve_command(model, True),
    }
    if not args.skip_mlserver:
        ensure_mlserver_tf()
        cases["MLServer / off"] = mlserver_command(model, False)
        cases["MLServer / on"] = mlserver_command(model, True)
    rounds = []
    for number in range(args.repeat):
        progress(f"tf: round {number + 1}/{args.repeat}")
        rounds.append(
            {name: measure(name, command, args.duration) for name, command in cases.items()}
        )
    save_raw("tf", rounds)
    keys = ("rps", "p99_us", "errors_total")
    results = {name: median_of([r[name] for r in rounds], *keys) for name in cases}
    publish("tf", table(results, args), args)


if __name__ == "__main__":
    main()
