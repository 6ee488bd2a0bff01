"""Model loads in-process: how many at once, progress lines, sync and async ``load()``,
and what a graph's start-up does with them (mlserve.core.loads)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from typing import Any

import pytest

import mlserve
from mlserve.core import loads
from mlserve.core.loads import as_loaded, load_threads, loads_in_parallel, run_load


def test_load_threads_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(loads.LOAD_THREADS_ENV, raising=False)
    assert 1 <= load_threads() <= 4
    monkeypatch.setenv(loads.LOAD_THREADS_ENV, "7")
    assert load_threads() == 7
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(loads.LOAD_THREADS_ENV, bad)
        with pytest.raises(ValueError, match=f"MLSERVE_LOAD_THREADS must be .* got '{bad}'"):
            load_threads()


def test_as_loaded_runs_calls_together_and_yields_each_as_it_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(loads.LOAD_THREADS_ENV, "2")
    second_yielded = threading.Event()

    def first() -> str:  # ends only once the second one's result was handed over
        assert second_yielded.wait(10), "the second call never ran beside the first"
        return "first"

    results = []
    for index, result in as_loaded([first, lambda: "second"]):
        results.append((index, result))
        if index == 1:
            second_yielded.set()
    assert results == [(1, "second"), (0, "first")]

    def broken() -> str:
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        list(as_loaded([broken, lambda: "fine"]))


def test_loads_gathered_in_the_body_run_after_it() -> None:
    ran: list[str] = []
    with loads_in_parallel():
        run_load(lambda: ran.append("gathered"))
        assert ran == []
    assert ran == ["gathered"]
    run_load(lambda: ran.append("at once"))  # outside: now
    assert ran == ["gathered", "at once"]


def test_a_long_load_says_it_is_still_loading(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(loads, "PROGRESS_SECONDS", 0.05)
    caplog.set_level(logging.INFO, "mlserve.model")
    told = threading.Event()

    class Tell(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("still loading"):
                told.set()

    class Patient(mlserve.V2ModelServer):
        def load(self) -> None:
            assert told.wait(10), "no progress line while loading"

    handler = Tell()
    logging.getLogger("mlserve.model").addHandler(handler)
    try:
        fn = mlserve.new_function("patient")
        fn.add_model("p", class_name=Patient)
        fn.to_mock_server()
    finally:
        logging.getLogger("mlserve.model").removeHandler(handler)
    said = [r.getMessage() for r in caplog.records if r.name == "mlserve.model"]
    assert said[0] == "loading model p"
    assert re.fullmatch(r"still loading model p \(\d+ s\)", said[1])
    assert re.fullmatch(r"model p ready in \d+\.\d\d s", said[-1])


class AsyncLoad(mlserve.V2ModelServer):
    async def load(self) -> None:
        await asyncio.sleep(0.01)
        if self.get_param("fail"):
            raise OSError("no weights")
        self.model = "loaded"

    def predict(self, request: dict[str, Any]) -> Any:
        return [self.model]


def test_an_async_load_is_awaited_and_its_failure_is_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "mlserve.model")
    fn = mlserve.new_function("async-loads")
    fn.add_model("good", class_name=AsyncLoad)
    fn.add_model("bad", class_name=AsyncLoad, fail=True)
    server = fn.to_mock_server()
    assert server.test("/v2/models/good/infer", body={"inputs": [1]})["outputs"] == ["loaded"]
    answer = server.test("/v2/models/bad/infer", body={"inputs": [1]}, silent=True)
    assert (answer.status_code, answer.body) == (
        503,
        {"error": "ModelNotReady: model bad is not ready: OSError: no weights"},
    )
    failed = [r for r in caplog.records if r.getMessage().startswith("failed to load model bad")]
    assert len(failed) == 1 and failed[0].exc_info is not None  # with the traceback
    assert re.fullmatch(
        r"failed to load model bad after \d+\.\d\d s: OSError: no weights", failed[0].getMessage()
    )


def test_an_async_load_from_a_running_loop_gets_a_loop_of_its_own() -> None:
    """A notebook runs a loop in its main thread: a model loaded there still loads."""
    model = AsyncLoad(name="nb")

    async def in_a_notebook() -> None:
        model.post_init("sync")

    asyncio.run(in_a_notebook())
    assert model.ready and model.model == "loaded"


def test_a_post_init_that_raises_still_stops_the_start() -> None:
    class Refuses(mlserve.V2ModelServer):
        def post_init(self, mode: str = "sync") -> None:
            raise ValueError("bad parameters")

    fn = mlserve.new_function("refuses")
    fn.add_model("ok", class_name=AsyncLoad)
    fn.add_model("no", class_name=Refuses)
    with pytest.raises(ValueError, match="bad parameters"):
        fn.to_mock_server()
