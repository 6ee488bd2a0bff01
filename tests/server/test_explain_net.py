"""Explain on a real ``mlserve serve`` process (docs/explain.md): a saturated explainer
never starves inference on the same model, KServe's v1 ``:explain`` and the versioned
V2 route answer."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.netserver import ServerProcess, start_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # inference's own budget is small: explain calls taking it would get infer 429s
    args = ("--model-concurrency", "2", "--model-queue", "2")
    process = start_server(*args, target="tests/server/explain_fn.py")
    yield process
    process.stop()


def test_a_saturated_explainer_never_starves_inference(server: ServerProcess) -> None:
    stop = threading.Event()
    explained: Counter[int] = Counter()

    def keep_explaining() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            while not stop.is_set():
                answer = http.post("/v2/models/slow/explain", json={"inputs": [[1, 2]]})
                explained[answer.status_code] += 1
                if answer.status_code == 429:
                    assert answer.headers["retry-after"] == "1"
                    time.sleep(0.05)

    with ThreadPoolExecutor(6) as pool, httpx.Client(base_url=server.url, timeout=60) as http:
        explainers = [pool.submit(keep_explaining) for _ in range(6)]
        deadline = time.monotonic() + 60
        while not explained[429] and time.monotonic() < deadline:  # one running, two queued
            time.sleep(0.05)
        inferred = Counter()
        for i in range(40):
            answer = http.post("/v2/models/slow/infer", json={"inputs": [[i, 1]]})
            inferred[answer.status_code] += 1
            assert answer.json()["outputs"] == [i + 1]
        stop.set()
        for explainer in explainers:
            explainer.result()
    assert time.monotonic() < deadline + 60  # generous: answered, not timed
    assert inferred == {200: 40}
    assert explained[429] >= 1 and explained[200] >= 1, explained
    assert set(explained) <= {200, 429}, explained


def test_kserve_v1_explain_answers_one_explanation_per_instance(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answer = http.post(
            "/v1/models/rows/versions/1:explain", json={"instances": [[1, 2], [3, 4]]}
        )
        latest = http.post("/v1/models/rows:explain", json={"instances": [[5, 6]]})
        wrong = http.post("/v1/models/rows:explain", json={"inputs": [[5, 6]]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "explanations": [
            {
                "feature_names": ["a", "b"],
                "shap_values": {"no": [-1, -2], "yes": [1, 2]},
                "base_values": {"no": 0.5, "yes": 0.1},
            },
            {
                "feature_names": ["a", "b"],
                "shap_values": {"no": [-3, -4], "yes": [3, 4]},
                "base_values": {"no": 0.5, "yes": 0.1},
            },
        ]
    }
    assert latest.json()["explanations"][0]["base_values"] == {"no": 0.5, "yes": 0.2}
    assert wrong.status_code == 400
    assert wrong.json() == {
        "error": 'InvalidInput: the explain request needs "instances": a list of rows'
    }


def test_the_versioned_v2_explain_route_reaches_its_version(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answer = http.post("/v2/models/rows/versions/1/explain", json={"inputs": [[1, 2]]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["model_name"], body["model_version"]) == ("rows", "1")
    assert body["outputs"]["base_values"] == [0.5, 0.1]
