"""Client errors keep the log quiet (docs/serving.md#errors-in-the-log): a 4xx or an
expected 5xx (501, 503, 504) is one line, a few a second for one (status, model),
never a traceback; a fault (500) keeps its traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from mlserve.server import graph_server
from mlserve.server.quiet import MAX_KEYS, LineBudget, model_in
from tests.netserver import start_server
from tests.server.hidden_fn import fn

FN = "tests/server/hidden_fn.py"
BODY = {"inputs": [1.0]}
CALLS = 1000


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_thousand_explain_calls_on_a_model_without_explain_log_a_few_lines(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    with log.open("wb") as stderr:
        server = start_server(target=FN, stderr=stderr)
    try:
        with httpx.Client(base_url=server.url) as client:
            assert client.post("/v2/models/plain/infer", json=BODY).status_code == 200
            before = log.stat().st_size
            for _ in range(CALLS):
                answer = client.post("/v2/models/plain/explain", json=BODY)
                assert answer.status_code == 501
            assert answer.json() == {"error": "NotImplementedError: model plain has no explain()"}
            explained = log.stat().st_size
            assert client.post("/v2/models/leaky/infer", json=BODY).status_code == 500
    finally:
        assert server.stop() == 0
    said = log.read_bytes()
    explain_lines = said[before:explained].decode()
    print(f"{CALLS} explain calls wrote {explained - before} bytes of log")
    assert 0 < explained - before < 20_000
    assert "Traceback" not in explain_lines
    lines = [line for line in explain_lines.splitlines() if " mlserve.server: " in line]
    assert lines
    assert all("/v2/models/plain/explain answered 501: NotImplementedError" in n for n in lines)
    fault = said[explained:].decode()  # the 500 keeps its traceback, the user's frames
    assert "request failed: RuntimeError: secret" in fault
    assert "Traceback (most recent call last)" in fault
    assert 'hidden_fn.py", line' in fault


def test_client_errors_are_one_line_and_a_fault_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graph_server, "ERROR_LINES", LineBudget())  # none spent by other tests
    server = fn.to_mock_server()
    with caplog.at_level(logging.INFO, logger="mlserve.server"):
        for path in ("/v2/models/nope/infer", "/v2/models/plain/explain"):
            server.test(path, BODY, silent=True)
        server.test("/v2/models/plain/infer", {"inputs": "not a list"}, silent=True)
        server.test("/v2/models/broken/infer", BODY, silent=True)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "mlserve.server"]
    assert [(level, message.split(":")[0]) for level, message in said] == [
        (logging.INFO, "/v2/models/nope/infer answered 404"),
        (logging.WARNING, "/v2/models/plain/explain answered 501"),
        (logging.INFO, "/v2/models/plain/infer answered 400"),
        (logging.WARNING, "/v2/models/broken/infer answered 503"),
    ]
    assert all(
        record.exc_info is None and "\n" not in record.getMessage()
        for record in caplog.records
        if record.name == "mlserve.server"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mlserve.server"):
        server.test("/v2/models/leaky/infer", BODY, silent=True)
    (fault,) = [record for record in caplog.records if record.name == "mlserve.server"]
    assert fault.levelno == logging.ERROR
    assert "Traceback (most recent call last)" in fault.getMessage()


def test_past_its_budget_a_kind_of_line_is_counted_and_the_next_line_says_so() -> None:
    clock = Clock()
    budget = LineBudget(per_key=2, overall=3, clock=clock)
    explain, ready = (501, "plain"), (503, "broken")
    assert [budget.take(explain) for _ in range(4)] == [0, 0, None, None]
    assert budget.take(ready) == 0
    assert budget.take(ready) is None  # three lines this second in all
    assert budget.take(ready, force=True) == 1  # a line that must be written is
    clock.now += 1.0
    assert budget.take(explain) == 2  # the next second: two were left out
    assert budget.take(explain) == 0
    assert budget.take(ready) == 0


def test_the_kinds_counted_are_bounded() -> None:
    clock = Clock()
    budget = LineBudget(per_key=1, overall=1, clock=clock)
    assert budget.take((404, "first")) == 0
    for index in range(MAX_KEYS + 10):
        assert budget.take((404, f"model-{index}")) is None
    clock.now += 1.0
    # the kinds past the bound share one count per status
    assert budget.take((404, "")) == 10


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("/v2/models/m/infer", "m"),
        ("/v2/models/m/versions/2/infer", "m"),
        ("/v1/models/m:predict", "m"),
        ("/v1/models/m/versions/3", "m"),
        ("/v2/repository/models/m/load", "m"),
        ("/v2/health/ready", ""),
        ("", ""),
    ],
)
def test_the_model_of_a_path(path: str, model: str) -> None:
    assert model_in(path) == model
