"""The rollout benchmark runs end to end (its numbers are measured, never asserted)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make system-deps")
def test_the_rollout_benchmark_measures_every_case() -> None:
    from benchmarks.__main__ import QUICK

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.rollout", *QUICK["rollout"], "--no-doc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for case in ("plain", "weighted 90/10", "weighted, sticky key", "plain + shadow"):
        assert any(line.startswith(f"| {case} | 8 connections |") for line in rows), rows
    shadowed = [line for line in rows if line.startswith("| plain + shadow | ")]
    assert len(shadowed) == 3, rows  # under load, in process, and paced beside the plain one
    assert shadowed[2].endswith(" ms |") and "nan" not in shadowed[2], shadowed  # server side
    assert "ERRORS" not in done.stdout
    assert "- a shadow route leaves the primary's p99" in done.stdout
