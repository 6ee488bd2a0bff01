"""The rollout benchmark runs end to end (its numbers are measured, never asserted)."""

from __future__ import annotations

import shutil

import pytest

from tests.test_benchmarks import quick_round


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make system-deps")
def test_the_rollout_benchmark_measures_every_case() -> None:
    done = quick_round("rollout", 300)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for case in ("plain", "weighted 90/10", "weighted, sticky key", "plain + shadow"):
        assert any(line.startswith(f"| {case} | 8 connections |") for line in rows), rows
    shadowed = [line for line in rows if line.startswith("| plain + shadow | ")]
    assert len(shadowed) == 3, rows  # under load, in process, and paced beside the plain one
    assert shadowed[2].endswith(" ms |") and "nan" not in shadowed[2], shadowed  # server side
    assert "ERRORS" not in done.stdout
    assert "- a shadow route leaves the primary's p99" in done.stdout
