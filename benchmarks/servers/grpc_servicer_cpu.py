"""mlserve's gRPC servicer alone: process CPU microseconds per ModelInfer, in-process.

    python benchmarks/servers/grpc_servicer_cpu.py [--requests 10000] [--rounds 3]

No sockets and no HTTP/2: 8 clients on one uvloop loop parse the same serialized
request, await ``InferenceServicer.ModelInfer`` (conversion, the core path, the
hop to the worker pool) and serialize the answer. Prints one JSON line, the median
per request form. ``benchmarks.grpc_load --inproc`` runs it for the tree and a
baseline commit (by PYTHONPATH), alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import struct
import time
from pathlib import Path
from typing import Any

import uvloop

from mlserve.cli import load_function
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.grpc.service import InferenceServicer

MODEL = Path(__file__).resolve().parent / "mlserve_model.py"


def _request(form: str) -> bytes:
    request = pb.ModelInferRequest(model_name="echo")
    tensor = request.inputs.add(name="input-0", datatype="FP32", shape=[1, 4])
    if form == "raw":
        request.raw_input_contents.append(struct.pack("<4f", 1.0, 2.0, 3.0, 4.0))
    else:
        tensor.contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.0])
    return request.SerializeToString()


class _Context:
    """What the servicer asks of a ``grpc.aio`` call's context, no network behind it."""

    async def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"{code}: {details}")

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def set_trailing_metadata(self, metadata: Any) -> None:
        pass

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


async def _client(servicer: InferenceServicer, body: bytes, count: int) -> None:
    context = _Context()
    for _ in range(count):
        request = pb.ModelInferRequest.FromString(body)
        answer = await servicer.ModelInfer(request, context)
        # service.serialized's step, written out: a baseline tree (--baseline, by PYTHONPATH)
        # may predate it, and its ModelInfer returns a message, not bytes.
        answer if type(answer) is bytes else answer.SerializeToString()


async def _round(servicer: InferenceServicer, body: bytes, requests: int) -> float:
    started = time.process_time()
    await asyncio.gather(*(_client(servicer, body, requests // 8) for _ in range(8)))
    return (time.process_time() - started) / (requests // 8 * 8) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    fn = load_function(str(MODEL))
    server = fn.to_graph_server()
    server.init_states(namespace=fn.namespace)
    server.init_object(fn.namespace)
    servicer = InferenceServicer(server)
    bodies = {form: _request(form) for form in ("typed", "raw")}
    results: dict[str, list[float]] = {form: [] for form in bodies}
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_round(servicer, bodies["typed"], 2000))  # warm-up
        for _ in range(args.rounds):
            for form, body in bodies.items():
                results[form].append(runner.run(_round(servicer, body, args.requests)))
    print(json.dumps({form: statistics.median(values) for form, values in results.items()}))


if __name__ == "__main__":
    main()
