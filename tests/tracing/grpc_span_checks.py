"""The gRPC face's spans, in a process of its own: the in-process gRPC face loads
mlserve's generated messages, which cannot share one process's descriptor pool with
tritonclient's, which the other tests import (tests/grpc/convert_checks.py).

    python -m tests.tracing.grpc_span_checks   # "ok" when a caller's traceparent is
                                               # continued and probes make no span
"""

from __future__ import annotations

import grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from mlserve.core import tracing
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.grpc.generated import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.tracing.test_spans import Serving, ended, one, parent_of, traceparent

MODEL_INFER = "inference.GRPCInferenceService/ModelInfer"


def main() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.enable(provider.get_tracer("mlserve-tests"))
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
        assert server.kind == SpanKind.SERVER
        assert f"{server.context.trace_id:032x}" == trace
        assert server.parent is not None and f"{server.parent.span_id:016x}" == parent
        attributes = server.attributes or {}
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
        provider.shutdown()
    print("ok")


if __name__ == "__main__":
    main()
