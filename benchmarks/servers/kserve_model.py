"""KServe's echo model, run in its own environment: ``python kserve_model.py --http_port P ...``.

KServe's server binds every interface (no host option); the harness sends to 127.0.0.1 only.
Its gRPC server (KServe's own settings) starts when ``--grpc_port`` is given.
"""

from __future__ import annotations

import sys
from typing import Any

import kserve
from kserve import InferOutput, InferRequest, InferResponse
from kserve.model_server import parser


class Echo(kserve.Model):
    """Returns its input: a [1, 4] FP32 tensor comes back as the output tensor."""

    def __init__(self) -> None:
        super().__init__("echo")
        self.ready = True

    def predict(
        self, payload: InferRequest, headers: Any = None, response_headers: Any = None
    ) -> InferResponse:
        array = payload.inputs[0].as_numpy()
        output = InferOutput("output-0", list(array.shape), "FP32")
        output.set_data_from_numpy(array, binary_data=False)
        return InferResponse(payload.id or "", self.name, [output])


if __name__ == "__main__":
    args, _ = parser.parse_known_args()
    kserve.ModelServer(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        enable_grpc=any(arg.startswith("--grpc_port") for arg in sys.argv),
        workers=1,
        enable_latency_logging=False,
    ).start([Echo()])
