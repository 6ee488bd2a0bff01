"""Triton's own Python client examples, vendored unchanged in tests/triton_examples,
run as subprocesses against one ``mlserve serve`` of examples/triton_models.py
(docs/triton.md#serve-tritons-example-models). Each must exit 0, but for the
programs whose only failure is a check that no server but Triton's own passes.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.netserver import ServerProcess, start_server
from tests.triton_shm import SHIM, shm_module

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

PROGRAMS = Path(__file__).parent / "triton_examples"
INFER = [
    "simple_http_infer_client",
    "simple_http_aio_infer_client",
    "simple_http_async_infer_client",
    "simple_http_string_infer_client",
    "simple_grpc_infer_client",
    "simple_grpc_aio_infer_client",
    "simple_grpc_async_infer_client",
    "simple_grpc_string_infer_client",
    "simple_grpc_custom_args_client",
    "simple_grpc_keepalive_client",
    "grpc_explicit_byte_content_client",
    "grpc_explicit_int_content_client",
    "grpc_explicit_int8_content_client",
]
SHARED_MEMORY = [
    "simple_http_shm_client",
    "simple_grpc_shm_client",
    "simple_http_shm_string_client",
    "simple_grpc_shm_string_client",
]


# The programs run unmodified; where pkg_resources is missing they find the shim's.
PROGRAM_ENV = (
    {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SHIM), os.environ.get("PYTHONPATH")])),
    }
    if str(SHIM) in sys.path or importlib.util.find_spec("pkg_resources") is None
    else None
)


def shared_memory_client() -> bool:
    """Whether tritonclient's shared-memory module imports (older releases, 2.41, import
    ``pkg_resources``, which setuptools 81 and later no longer ship: tests/shm_shim
    provides its one call, for the programs too)."""
    try:
        shm_module()
    except (ModuleNotFoundError, OSError):
        return False
    return True


NEEDS_SHARED_MEMORY = pytest.mark.skipif(
    not shared_memory_client(), reason="tritonclient.utils.shared_memory does not import"
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    served = start_server("--model-control-mode", "explicit", target="examples/triton_models.py")
    yield served
    served.stop()


def run(program: str, server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    address = server.grpc_address if "grpc" in program + "".join(args) else server.address
    return subprocess.run(
        [sys.executable, str(PROGRAMS / f"{program}.py"), "-u", address, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=PROGRAM_ENV,
    )


@pytest.mark.parametrize("program", INFER)
def test_program_passes(server: ServerProcess, program: str) -> None:
    done = run(program, server)
    assert done.returncode == 0, done.stdout + done.stderr


@NEEDS_SHARED_MEMORY
@pytest.mark.parametrize("program", SHARED_MEMORY)
def test_shared_memory_program_passes(server: ServerProcess, program: str) -> None:
    done = run(program, server)
    assert done.returncode == 0, done.stdout + done.stderr


@NEEDS_SHARED_MEMORY
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_reuse_infer_objects_program_passes(server: ServerProcess, protocol: str) -> None:
    """The same inputs and outputs, in memory and in system shared memory, over again."""
    done = run("reuse_infer_objects_client", server, "-i", protocol)
    assert done.returncode == 0, done.stdout + done.stderr


def test_http_model_control_program_passes_on_a_repository_of_seven() -> None:
    """It counts 7 models in the repository index where the gRPC one counts 8 (Triton's
    two programs disagree): against Triton's example models but one, it passes: its
    loads, a refused config, a config override it reads back, an unload."""
    served = start_server(
        "--model-control-mode", "explicit", target="tests/server/triton_seven_models.py"
    )
    try:
        done = run("simple_http_model_control", served)
    finally:
        served.stop()
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("face", ["http", "grpc"])
def test_load_of_an_unknown_model_fails_to_load(server: ServerProcess, face: str) -> None:
    """The model-control programs' last check: the gRPC one does not reach it, and
    the HTTP one exits 0 whatever the words."""
    client = (
        httpclient.InferenceServerClient(server.address)
        if face == "http"
        else grpcclient.InferenceServerClient(server.grpc_address)
    )
    with pytest.raises(httpclient.InferenceServerException, match="failed to load"):
        client.load_model("wrong_model_name")


def test_http_health_program_fails_only_on_the_server_name(server: ServerProcess) -> None:
    """It wants the server named "triton" (mlserve's is "mlserve"): the liveness,
    readiness and model readiness it checks before pass, the name is its one failure."""
    done = run("simple_http_health_metadata", server)
    assert (done.returncode, done.stdout, done.stderr) == (1, "FAILED : get_server_metadata\n", "")


def test_grpc_health_program_fails_only_on_the_server_name(server: ServerProcess) -> None:
    """As the HTTP one; its ``sys.exit(1)`` then raises NameError, for the program
    never imports ``sys`` (a bug of the vendored program, kept unchanged)."""
    done = run("simple_grpc_health_metadata", server)
    assert (done.returncode, done.stdout) == (1, "FAILED : get_server_metadata\n")
    assert done.stderr.endswith("NameError: name 'sys' is not defined\n"), done.stderr


@pytest.mark.parametrize("face", ["http", "grpc"])
def test_the_health_programs_checks_after_the_server_name_pass(
    server: ServerProcess, face: str
) -> None:
    """What the health programs check after the name, which they do not reach."""
    if face == "http":
        client: Any = httpclient.InferenceServerClient(server.address)
        options: dict[str, bool] = {}
    else:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        options = {"as_json": True}
    assert client.get_model_metadata("simple", **options)["name"] == "simple"
    with pytest.raises(httpclient.InferenceServerException) as unknown:
        client.get_model_metadata("wrong_model_name", **options)
    assert "Request for unknown model" in unknown.value.message()
    config = client.get_model_config("simple", **options)
    assert config.get("config", config)["name"] == "simple"
