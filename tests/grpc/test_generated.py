"""The checked-in stubs are what `make generate` writes from the proto, with
the same pinned protoc (tests/grpc/venvs.py: PROTOC_REQUIREMENTS)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.grpc.venvs import PROTOC_REQUIREMENTS, ROOT, venv


def test_the_makefile_pins_the_same_protoc() -> None:
    makefile = (ROOT / "Makefile").read_text()
    pinned = re.search(r"^PROTOC_REQUIREMENTS\s*:=\s*(.+)$", makefile, re.MULTILINE)
    assert pinned is not None
    assert tuple(pinned[1].replace("'", "").split()) == PROTOC_REQUIREMENTS


def fresh_matches_checked_in(tmp_path: Path, package: str, proto: str, grpc: bool) -> list[str]:
    """Run the Makefile's `generate` command for ``mlserve/<package>/proto/<proto>`` into
    ``tmp_path``, check each file it writes equals the checked-in one; their names."""
    outputs = [f"--python_out={tmp_path}", f"--pyi_out={tmp_path}"]
    outputs += [f"--grpc_python_out={tmp_path}"] if grpc else []
    subprocess.run(
        [
            str(venv("protoc", *PROTOC_REQUIREMENTS)),
            "-m",
            "grpc_tools.protoc",
            f"-Imlserve/{package}/generated=mlserve/{package}/proto",
            *outputs,
            f"mlserve/{package}/generated/{proto}",
        ],
        cwd=ROOT,
        check=True,
    )
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for path in fresh:
        assert (tmp_path / path).read_bytes() == (ROOT / path).read_bytes(), f"{path} is stale"
    return [path.name for path in fresh]


def test_checked_in_stubs_match_the_proto(tmp_path: Path) -> None:
    assert fresh_matches_checked_in(tmp_path, "grpc", "grpc_predict_v2.proto", grpc=True) == [
        "grpc_predict_v2_pb2.py",
        "grpc_predict_v2_pb2.pyi",
        "grpc_predict_v2_pb2_grpc.py",
    ]


def test_checked_in_config_module_matches_the_proto(tmp_path: Path) -> None:
    # The `generate` target's second command: TF Serving's config messages, which the
    # repository reads (mlserve/protocol/proto), without gRPC stubs.
    names = fresh_matches_checked_in(tmp_path, "protocol", "model_server_config.proto", grpc=False)
    assert names == ["model_server_config_pb2.py", "model_server_config_pb2.pyi"]
    makefile = (ROOT / "Makefile").read_text()
    assert "-Imlserve/protocol/generated=mlserve/protocol/proto" in makefile
    assert "mlserve/protocol/generated/model_server_config.proto" in makefile


def test_the_config_module_reads_what_tf_serving_writes() -> None:
    # Same field names and numbers as TF Serving's own ModelServerConfig: its text and
    # its wire form read alike, and both modules live in one process (no clash).
    pytest.importorskip("tensorflow_serving")
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2 as theirs

    from mlserve.protocol.generated import model_server_config_pb2 as ours

    config = theirs.ModelServerConfig()
    entry = config.model_config_list.config.add(name="m", base_path="/m", model_platform="tf")
    entry.model_version_policy.specific.versions.extend([1, 2])
    entry.version_labels["stable"] = 1
    entry.logging_config.sampling_config.sampling_rate = 0.25
    mine = ours.ModelServerConfig.FromString(config.SerializeToString())
    assert text_format.MessageToString(mine) == text_format.MessageToString(config)
    assert text_format.Parse(text_format.MessageToString(config), ours.ModelServerConfig()) == mine
