"""``ModelStats``: what the statistics extension reports."""

from __future__ import annotations

import threading

from mlserve.core.stats import ModelStats


def test_counts_and_durations() -> None:
    stats = ModelStats()
    stats.record_inference(True, 100)
    stats.record_inference(True, 50)
    stats.record_inference(False, 7)
    stats.record_execution(2, 120)
    stats.record_execution(1, 30)
    entry = stats.to_dict("m", "1")
    assert (entry["name"], entry["version"]) == ("m", "1")
    assert entry["inference_count"] == 2 and entry["execution_count"] == 2
    assert entry["inference_stats"]["success"] == {"count": 2, "ns": 150}
    assert entry["inference_stats"]["fail"] == {"count": 1, "ns": 7}
    assert entry["inference_stats"]["compute_infer"] == {"count": 2, "ns": 150}
    assert [(b["batch_size"], b["compute_infer"]) for b in entry["batch_stats"]] == [
        (1, {"count": 1, "ns": 30}),
        (2, {"count": 1, "ns": 120}),
    ]


def test_threads_lose_no_count() -> None:
    stats = ModelStats()

    def work() -> None:
        for _ in range(2000):
            stats.record_inference(True, 1)
            stats.record_execution(1, 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert stats.inference_count == 8000 and stats.execution_count == 8000


def test_unbatched_calls_fold_in_when_read_and_lose_none_to_threads() -> None:
    stats = ModelStats()
    calls = 3 * ModelStats.FOLD_AT  # folds while the threads still append
    start_ns = 1_700_000_000_000_000_000

    def work() -> None:
        for index in range(calls // 4):
            stats.record_call(start_ns + index, 10, 4)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats.record_inference(False, 7)
    entry = stats.to_dict("m", "1")
    assert entry["inference_count"] == entry["execution_count"] == calls
    assert entry["inference_stats"]["success"] == {"count": calls, "ns": 10 * calls}
    assert entry["inference_stats"]["compute_infer"] == {"count": calls, "ns": 4 * calls}
    assert entry["batch_stats"][0]["compute_infer"] == {"count": calls, "ns": 4 * calls}
    assert entry["inference_stats"]["fail"] == {"count": 1, "ns": 7}
    assert entry["last_inference"] >= start_ns // 1_000_000


def test_one_unbatched_call_is_seen_at_once() -> None:
    stats = ModelStats()
    stats.record_call(5_000_000, 1_000_000, 3)
    assert (stats.inference_count, stats.execution_count, stats.last_inference) == (1, 1, 6)
    assert stats.batches[1].ns == 3
