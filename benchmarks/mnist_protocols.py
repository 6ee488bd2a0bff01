"""MNIST-style REST-vs-gRPC comparison, as TF Serving users run it: a batch of 100
images of 784 floats to a softmax model (784 -> 10), over five protocols of one server:

- TF Serving REST (``/v1/models/mnist:predict``, ``instances`` rows),
- TF Serving gRPC (``PredictionService.Predict``, ``tf.make_tensor_proto``: tensor_content),
- V2 JSON (``/v2/models/mnist/infer``), V2 binary (binary tensor extension),
- V2 gRPC (``ModelInfer`` with ``raw_input_contents``).

Each protocol runs ``--requests`` sequential calls (latency) and then ``--threads``
client threads for ``--duration`` seconds (throughput). The server is
``python -m mlserve serve <repository> --grpc-port``; the clients run in this process.
Prints a Markdown table and puts it into ``docs/performance.md`` (section ``mnist``)
unless ``--no-doc``.

    python -m benchmarks.mnist_protocols [--requests 200] [--threads 8] [--duration 5] [--no-doc]
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    RESULTS,
    arguments,
    exit_on_sigterm,
    free_port,
    heading,
    progress,
    publish,
    running,
    table_lines,
)

WORK = RESULTS / "mnist"
BATCH, PIXELS = 100, 784
TIMEOUT = 30.0
NOTE = (
    "The JSON forms spend their time turning 78,400 numbers into text and back (TF Serving's "
    "row form `instances` more than V2's flat `data`); the binary forms pass the raw bytes: "
    "a TF Serving `tensor_content` or V2 `raw_input_contents` is read with `np.frombuffer`, "
    "never re-serialised, and copied once into the writable array a model is promised "
    "(protocol/tensors); outputs go back in the typed `*_val` fields as TF Serving writes them."
)


def save_model() -> Path:
    """A softmax regression 784 -> 10 (TF Serving's MNIST tutorial model), saved once."""
    folder = WORK / "repository" / "mnist" / "1"
    if not (folder / "saved_model.pb").is_file():
        import keras
        import tensorflow as tf

        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((PIXELS,)), keras.layers.Dense(10, activation="softmax")]
        )
        tf.saved_model.save(model, str(folder))
    return folder.parent.parent


def clients(port: int, grpc_port: int, images: np.ndarray) -> dict[str, Callable[[], Any]]:
    """One call of each protocol (each keeps its connection, as a real client does)."""
    import grpc
    import httpx
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from mlserve.grpc.generated import grpc_predict_v2_pb2 as v2
    from mlserve.grpc.generated import grpc_predict_v2_pb2_grpc as v2_grpc
    from mlserve.protocol.tensors import BINARY_HEADER

    base = f"http://127.0.0.1:{port}"
    http = httpx.Client(timeout=TIMEOUT)
    channel = grpc.insecure_channel(
        f"127.0.0.1:{grpc_port}", options=[("grpc.max_receive_message_length", -1)]
    )
    tfs = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    infer = v2_grpc.GRPCInferenceServiceStub(channel)

    rest_body = json.dumps({"instances": images.tolist()}).encode()
    v2_body = json.dumps(
        {
            "inputs": [
                {
                    "name": "inputs",
                    "datatype": "FP32",
                    "shape": [BATCH, PIXELS],
                    "data": images.ravel().tolist(),
                }
            ]
        }
    ).encode()
    raw = images.astype("<f4").tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "inputs",
                    "datatype": "FP32",
                    "shape": [BATCH, PIXELS],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    binary_headers = {
        BINARY_HEADER: str(len(header)),
        "content-type": "application/octet-stream",
    }
    tfs_request = predict_pb2.PredictRequest()
    tfs_request.model_spec.name = "mnist"
    tfs_request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(images))
    v2_request = v2.ModelInferRequest(model_name="mnist")
    v2_request.inputs.add(name="inputs", datatype="FP32", shape=[BATCH, PIXELS])
    v2_request.raw_input_contents.append(raw)
    json_headers = {"content-type": "application/json"}

    def ok(response: Any) -> Any:
        response.raise_for_status()
        return response

    return {
        "TF Serving REST": lambda: ok(
            http.post(f"{base}/v1/models/mnist:predict", content=rest_body, headers=json_headers)
        ),
        "TF Serving gRPC": lambda: tfs.Predict(tfs_request, TIMEOUT),
        "V2 JSON": lambda: ok(
            http.post(f"{base}/v2/models/mnist/infer", content=v2_body, headers=json_headers)
        ),
        "V2 binary": lambda: ok(
            http.post(f"{base}/v2/models/mnist/infer", content=header + raw, headers=binary_headers)
        ),
        "V2 gRPC": lambda: infer.ModelInfer(v2_request, TIMEOUT),
    }


def sequential(call: Callable[[], Any], requests: int) -> dict[str, float]:
    for _ in range(5):
        call()  # warm-up
    latencies = []
    for _ in range(requests):
        started = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    return {
        "mean_ms": statistics.fmean(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


def concurrent(make: Callable[[], Callable[[], Any]], threads: int, duration: float) -> float:
    """Requests/s of ``threads`` threads, each with its own client, for ``duration`` s."""
    calls = [make() for _ in range(threads)]
    counts = [0] * threads
    stop_at = time.perf_counter() + duration

    def loop(index: int) -> None:
        while time.perf_counter() < stop_at:
            calls[index]()
            counts[index] += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - started)


def table(results: dict[str, dict[str, float]], threads: int) -> list[str]:
    header = ["protocol", "sequential mean (ms)", "sequential p99 (ms)"]
    rows = [
        [name, f"{row['mean_ms']:.1f}", f"{row['p99_ms']:.1f}", f"{row['rps']:.1f}"]
        + [f"{row['rps'] * BATCH:,.0f}"]
        for name, row in results.items()
    ]
    return table_lines([*header, f"{threads} threads: batches/s", "images/s"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, duration=5.0)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    exit_on_sigterm()
    repository = save_model()
    ports: dict[str, int] = {}

    def command(port: int, workdir: Path) -> list[str]:
        ports["grpc"] = free_grpc = free_port()
        argv = [sys.executable, "-m", "mlserve", "serve", str(repository), "--port", str(port)]
        return [*argv, "--grpc-port", str(free_grpc)]

    with running(command, "mnist", "/v2/models/mnist/ready") as (port, _pid, _):
        images = np.random.default_rng(0).random((BATCH, PIXELS), dtype=np.float32)
        results: dict[str, dict[str, float]] = {}
        for name in clients(port, ports["grpc"], images):
            row = sequential(clients(port, ports["grpc"], images)[name], args.requests)
            row["rps"] = concurrent(
                lambda name=name: clients(port, ports["grpc"], images)[name],
                args.threads,
                args.duration,
            )
            results[name] = row
            progress(f"mnist {name:16} mean {row['mean_ms']:6.1f} ms  {row['rps']:7.1f} batches/s")
    lines = heading(
        "MNIST-style: TF Serving REST vs gRPC vs V2",
        f"python -m benchmarks.mnist_protocols --requests {args.requests} --threads "
        f"{args.threads} --duration {args.duration:g}",
        f". A batch of {BATCH} images of {PIXELS} FP32 values to a softmax model ({PIXELS} -> "
        f"10, SavedModel) on one `mlserve serve` process, {args.requests} sequential requests "
        f"per protocol, then {args.threads} client threads for {args.duration:g} s; clients "
        "and server share the machine.",
    )
    publish("mnist", "\n".join([*lines, *table(results, args.threads), "", NOTE]), args)


if __name__ == "__main__":
    main()
