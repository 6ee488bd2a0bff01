"""The benchmark harness runs end to end (numbers are not checked: speed is measured,
never asserted), and its generated sections replace their own part of the document."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common

ROOT = Path(__file__).resolve().parent.parent


def quick_round(step: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``make bench``'s quick round of ``step`` (benchmarks/__main__.py's QUICK), its
    document left alone; it must exit 0."""
    from benchmarks.__main__ import QUICK

    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{step}", *QUICK[step], "--no-doc"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_a_section_replaces_its_own_part_and_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text("# Performance\n\nhand-written\n")
    monkeypatch.setattr(common, "DOC", doc)
    common.write_section("http", "first")
    common.write_section("grpc", "other")
    common.write_section("http", "second")
    text = doc.read_text()
    assert "hand-written" in text and "other" in text
    assert "second" in text and "first" not in text
    assert text.count("<!-- http-begin -->") == 1


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make system-deps")
def test_the_http_load_measures_mlserve_and_the_floor_in_every_request_form() -> None:
    """... and, with ``--baseline``, mlserve as of a commit beside the tree's own (A/B)."""
    argv = ["--servers", "mlserve", "floor", "--connections", "2", "--duration", "1"]
    argv += ["--warmup", "1", "--repeat", "1", "--no-doc", "--baseline", "HEAD"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.http_load", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for server, form in [("floor", "tensor"), ("mlserve", "tensor"), ("mlserve", "binary")]:
        assert any(line.startswith(f"| {server} | {form} | 2 |") for line in rows), rows
    assert any(line.startswith("| mlserve@HEAD | rows | 2 |") for line in rows), rows
    assert any(line.startswith("| tensor | 2 |") and " -> " in line for line in rows), rows
    assert "ERRORS" not in done.stdout


@pytest.mark.skipif(
    shutil.which("wrk") is None or shutil.which("h2load") is None,
    reason="wrk and h2load are installed by make system-deps",
)
def test_the_streaming_benchmark_measures_both_faces_and_checks_every_chunk() -> None:
    argv = ["--servers", "mlserve", "--duration", "1", "--warmup", "1", "--repeat", "1"]
    argv += ["--ttfc-streams", "3", "--chunks", "20", "--no-doc"]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.streaming", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| mlserve")]
    assert [line.split(" | ")[1] for line in rows] == ["sse", "sse", "grpc", "grpc"], rows
    assert all(line.endswith("| 0 |") for line in rows), rows  # no stream short of a chunk


def test_the_goals_of_every_section_are_collected_in_one_table() -> None:
    from benchmarks.__main__ import goals_summary

    doc = (
        "<!-- http-begin -->\n## HTTP\n\ntable\n\n- at least 8x MLServer: 5.1x, not met\n"
        "- a lower p99: 3 ms vs 9 ms, met\n<!-- http-end -->\n\n"
        "<!-- scale-begin -->\n## Scale\n\n- two workers vs one: 1.7x\n<!-- scale-end -->\n"
    )
    rows = [line for line in goals_summary(doc).splitlines() if line.startswith("| HTTP")]
    assert rows == [
        "| HTTP | at least 8x MLServer | 5.1x | not met |",
        "| HTTP | a lower p99 | 3 ms vs 9 ms | met |",
    ]


def test_the_tracking_section_gives_the_counted_cost_beside_the_timed_one() -> None:
    import argparse

    from benchmarks.tracking import table

    args = argparse.Namespace(duration=4, repeat=3, warmup=1, streams=["off", "file"], callers=8)
    stats = {
        ("http", "off"): {"rps": 1000.0, "cpu_us": 80.0},
        ("http", "file"): {"rps": 850.0, "cpu_us": 94.0},
    }
    text = table(stats, args, {"off": 200_000.0, "file": 216_000.0})
    assert "200.0k instructions per request off, 216.0k with a file stream" in text
    assert "tracking adds 8.0%." in text
    assert "- http, requests/s on/off: 0.85, not met" in text
    assert "Counted" not in table(stats, args)


@pytest.mark.parametrize("case", ["http", "grpc"])
def test_the_instructions_drivers_answer_their_requests(case: str) -> None:
    """``http`` through the HTTP protocol (hotpath's transport raises on any answer but a
    200), ``grpc`` through the V2 servicer (the driver's context raises on any abort)."""
    subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", f"--run-{case}", "40"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
        check=True,
    )


@pytest.mark.parametrize("stream", ["off", "file"])
def test_the_tracking_driver_logs_every_request(stream: str, tmp_path: Path) -> None:
    """The ``tracking`` case's driver answers every request (else hotpath's transport
    raises) and, tracking to a file, writes a record per request there."""
    log = tmp_path / "model-logs.jsonl"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", "--run-tracking", "40"]
        + ["--stream", "off" if stream == "off" else str(log)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
        check=True,
    )
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert len(records) == (0 if stream == "off" else 200)  # 40 and two warm-ups of 80
    assert all(record["resp"]["outputs"] == [10, 26] for record in records)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind counts instructions")
def test_callgrind_counts_the_instructions_of_a_command() -> None:
    from benchmarks.instructions import _collected

    empty = _collected([sys.executable, "-c", "pass"])
    busy = _collected([sys.executable, "-c", "sum(range(100_000))"])
    assert busy > empty > 0


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make system-deps")
def test_the_monitoring_step_measures_its_three_parts_in_its_quick_round() -> None:
    """``make bench``'s quick round of the monitoring step: records consumed, serving
    with and without ``--monitor``, and drift detected under a paced load (the paced
    wrk script answers with the rate asked for)."""
    done = quick_round("monitoring", 240)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| 20,000 | 4 | 12 |") for line in rows), rows
    assert any(line.startswith("| tracking alone |") for line in rows), rows
    assert any(line.startswith("| tracking, `--monitor` |") for line in rows), rows
    (drift,) = [line for line in rows if line.startswith("| 0.50 |")]
    shifted = float(drift.split("|")[-2].replace(",", ""))
    assert 350 < shifted < 650, drift  # paced at 500 requests/s
    assert "- records/s one monitor consumes on one CPU" in done.stdout


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make system-deps")
def test_the_console_step_measures_its_three_cases_in_its_quick_round() -> None:
    """``make bench``'s quick round of the console step: serving with the console off, on,
    and open in pages that poll its data calls (every call answered)."""
    done = quick_round("console", 120)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| console off (`--no-console`) |") for line in rows), rows
    assert any(line.startswith("| console on, nobody watching |") for line in rows), rows
    (watched,) = [line for line in rows if line.startswith("| console open, 3 pages polling |")]
    assert int(watched.split("|")[-2]) >= 6, watched  # 3 pages, 2 calls a tick, 1 tick at least
    assert "- serving with the console open (3 pages polling)" in done.stdout


def test_the_explain_step_measures_both_models_against_shap_in_its_quick_round() -> None:
    """``make bench``'s quick round of the explain step: each model explained over HTTP
    and by shap in-process, mlserve's values checked against shap's own."""
    done = quick_round("explain", 300)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert any(
        line.startswith("| XGBoost, 100 trees, depth 6 (tree explainer) | 1 |") for line in rows
    )
    assert any(line.startswith("| scikit-learn MLP 20-32-3 (permutation") for line in rows), rows
    assert done.stdout.count("- explain over HTTP, time per row of shap's in-process") == 2


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is installed by make system-deps")
def test_the_tracing_step_measures_the_baseline_off_and_on_in_its_quick_round() -> None:
    """``make bench``'s quick round of the tracing step: the baseline, off, and on with
    every request's spans reaching the receiver."""
    done = quick_round("tracing", 180)
    rows = {
        line.split("|")[1].strip(): line for line in done.stdout.splitlines() if line[:2] == "| "
    }
    assert {"baseline", "off", "on"} <= rows.keys(), rows
    spans = float(rows["on"].split("|")[-2])
    assert spans >= 1, rows["on"]  # every request sampled: its server span at least
    assert "- on at most 10 % below off, requests/s on/off: " in done.stdout
