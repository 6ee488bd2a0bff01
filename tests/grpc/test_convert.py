"""``infer_response_bytes``: the bytes protobuf would write for the same answer, whatever
the answer (the cached heads and joined fields of the usual one included). The checks
run in a process of their own (tests/grpc/convert_checks.py says why)."""

from __future__ import annotations

import subprocess
import sys

from tests.grpc.venvs import ROOT

CHECKS = [
    "the_bytes_are_protobufs_own",
    "the_usual_answers_build_no_message",
    "the_shape_must_hold_the_values_typed",
    "the_usual_answer_reads_back",
]


def test_response_bytes_checks() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.grpc.convert_checks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [*CHECKS, "ok"]
