"""The gRPC face's spans, in a process of its own: the in-process gRPC face loads
mlserve's generated messages, which cannot share one process's descriptor pool with
tritonclient's, which the other tests import (tests/grpc/convert_checks.py).

    python -m tests.tracing.grpc_span_checks   # "ok" when a caller's traceparent is
                                               # continued and probes make no span
"""

from __future__ import annotations

import grpc

from mlserve.core import tracing
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.tracing.test_spans import Serving, ended, one, parent_of, traceparent

MODEL_INFER = "inference.GRPCInferenceService/ModelInfer"


def main() -> None:
    spans: list[tracing.Span] = []
    tracing.enable(spans.append)
    serving = Serving(grpc_face=True)
    try:
        trace, parent, header = traceparent()
        request = pb.ModelInferRequest(model_name="hooks")
        tensor = request.inputs.add(name="x", datatype="INT64", shape=[2])
        tensor.contents.int64_contents.extend([1, 2])
        with grpc.insecure_channel(f"127.0.0.1:{serving.grpc_port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            stub.ModelInfer(request, metadata=[("traceparent", header)])
            stub.ServerLive(pb.ServerLiveRequest())
            stub.ServerReady(pb.ServerReadyRequest())
            stub.ModelReady(pb.ModelReadyRequest(name="hooks"))
        finished = ended(spans, MODEL_INFER)
        server = one(finished, MODEL_INFER)
        assert server.kind == "server"
        assert f"{server.trace_id:032x}" == trace
        assert server.remote_parent and f"{server.parent_id:016x}" == parent
        attributes = server.attributes
        assert attributes["rpc.system"] == "grpc"
        assert attributes["rpc.service"] == "inference.GRPCInferenceService"
        assert attributes["rpc.method"] == "ModelInfer"
        assert attributes["rpc.grpc.status_code"] == 0
        assert attributes["mlserve.model"] == "hooks"
        assert parent_of(finished, one(finished, "predict")).name == "route hooks"
        assert not [span for span in finished if span.name.endswith(("Live", "Ready"))]
    finally:
        serving.stop()
        tracing.disable()
    print("ok")


if __name__ == "__main__":
    main()
