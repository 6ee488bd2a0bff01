"""The gRPC floor: a bare ``grpc.aio`` servicer of the V2 service whose ModelInfer
answers a fixed [1, 4] FP32 response. Nothing serving V2 gRPC in Python is faster."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import grpc

from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc

REPLY = pb.ModelInferResponse(model_name="echo", id="1")
REPLY.outputs.add(name="output-0", datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend(
    [1.0, 2.0, 3.0, 4.0]
)


class Floor(pb_grpc.GRPCInferenceServiceServicer):
    async def ModelInfer(self, request: Any, context: Any) -> Any:
        return REPLY


async def serve(port: int) -> None:
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Floor(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
