"""The stubs import, and `mlserve serve --grpc-port` answers a real ModelInfer,
under the oldest and the newest protobuf the package declares, and beside
kserve and tritonclient (which pin protobuf < 7) in one environment.

Each case is a throwaway venv under the temp dir (tests/grpc/venvs.py): built
once from pip's cache (about a minute), reused by later runs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.grpc.venvs import ROOT, clean_env, venv
from tests.netserver import ServerProcess
from tests.services import free_port, wait_for_port

# case -> (requirements beside this checkout, the protobuf version it must get)
CASES = {
    "oldest": (("protobuf==4.25.0", "grpcio==1.60.0"), "4.25.0"),
    "newest": (("protobuf<8", "grpcio"), "7."),
    "kserve-triton": (("kserve==0.21.*", "tritonclient[grpc]==2.73.*"), "6."),
}

# A ModelInfer, then the extension RPCs, with mlserve's own stubs (the venv's protobuf
# and grpcio).
STUB_CLIENT = """
import sys, grpc
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb, grpc_predict_v2_pb2_grpc as rpc
request = pb.ModelInferRequest(model_name="scale")
tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
tensor.contents.fp32_contents.extend([1.0, 2.0])
request.parameters["typed_outputs"].bool_param = True  # typed back (raw unless asked)
stub = rpc.GRPCInferenceServiceStub(grpc.insecure_channel(sys.argv[1]))
outputs = {o.name: o for o in stub.ModelInfer(request, timeout=30).outputs}
config = stub.ModelConfig(pb.ModelConfigRequest(name="scale")).config
stats = stub.ModelStatistics(pb.ModelStatisticsRequest(name="scale")).model_stats[0]
index = {m.name: m.state for m in stub.RepositoryIndex(pb.RepositoryIndexRequest()).models}
assert (config.input[0].dims, stats.inference_count, index["scale"]) == ([-1, 2], 1, "READY")
streamed = list(stub.ModelStreamInfer(iter([request, request]), timeout=30))
assert [r.infer_response.model_name for r in streamed] == ["scale", "scale"]
# Typed contents past the small-tensor path, both ways (numpy from the field, packed out).
big = pb.ModelInferRequest(model_name="echo")
big.parameters["typed_outputs"].bool_param = True
values = [i / 8 for i in range(1000)]
for name, datatype, field in (("f", "FP32", "fp32_contents"), ("d", "FP64", "fp64_contents"),
                              ("i", "INT64", "int64_contents")):
    getattr(big.inputs.add(name=name, datatype=datatype, shape=[1000]).contents, field).extend(
        [int(v) for v in values] if datatype == "INT64" else values)
echoed = {o.name: o.contents for o in stub.ModelInfer(big, timeout=30).outputs}
assert list(echoed["f"].fp32_contents) == values and list(echoed["d"].fp64_contents) == values
assert list(echoed["i"].int64_contents) == [int(v) for v in values]
print(list(outputs["scaled"].contents.fp32_contents))
"""

# The same with tritonclient.grpc (its own `inference.*` stubs, so in a process of its own).
TRITON_CLIENT = """
import sys
import numpy as np
import tritonclient.grpc as grpcclient
client = grpcclient.InferenceServerClient(sys.argv[1])
x = grpcclient.InferInput("x", [1, 2], "FP32")
x.set_data_from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
print(client.infer("scale", [x]).as_numpy("scaled").tolist()[0])
"""


def _python(case: str) -> Path:
    requirements, _ = CASES[case]
    return venv(f"compat-{case}", "-e", str(ROOT), *requirements)


def _run(python: Path, *args: str) -> str:
    result = subprocess.run(
        [str(python), *args], cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Iterator[tuple[str, Path, ServerProcess]]:
    """A case's venv and `mlserve serve --grpc-port` running from it."""
    python = _python(request.param)
    port, grpc_port = free_port(), free_port()
    command = [str(python.parent / "mlserve"), "serve", "tests/http/fn.py"]
    command += ["--port", str(port), "--grpc-port", str(grpc_port)]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    server = ServerProcess(proc, port, grpc_port)
    try:
        wait_for_port(grpc_port, timeout=60, proc=proc)
    except RuntimeError:
        raise AssertionError(proc.stderr.read().decode() if proc.stderr else "") from None
    yield request.param, python, server
    assert server.stop() == 0


@pytest.mark.timeout(900)
def test_serve_grpc_under_the_declared_protobufs(case: tuple[str, Path, ServerProcess]) -> None:
    name, python, server = case
    _, expected = CASES[name]
    version = _run(python, "-c", "import google.protobuf as p, mlserve; print(p.__version__)")
    assert version.startswith(expected), f"{name}: protobuf {version}"
    module = _run(python, "-c", "import mlserve; print(mlserve.__file__)")
    assert Path(module).is_relative_to(ROOT), "the venv must serve this checkout"
    assert _run(python, "-c", STUB_CLIENT, server.grpc_address) == "[3.0, 6.0]"
    if name == "kserve-triton":
        assert _run(python, "-c", TRITON_CLIENT, server.grpc_address) == "[3.0, 6.0]"
        # kserve registers `inference.*` too: it imports beside mlserve, in a process of its own.
        assert _run(python, "-c", "import kserve, mlserve; print('ok')") == "ok"
