"""ServerLimits from flags and environment; a model's gate in-process."""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import mlserve
from mlserve import V2ModelServer
from mlserve.core.deadlines import with_timeout
from mlserve.core.gate import ModelGate
from mlserve.core.limits import (
    DEFAULTS,
    Overloaded,
    RequestTimeout,
    ServerLimits,
    add_limit_flags,
    server_limits,
)


def test_environment_then_flags_override_the_defaults() -> None:
    env = {"MLSERVE_REQUEST_TIMEOUT": "2.5", "MLSERVE_MODEL_QUEUE": "3"}
    limits = ServerLimits.from_env(env, model_queue=7, drain_timeout=None)
    assert limits.request_timeout == 2.5
    assert limits.model_queue == 7
    assert limits.drain_timeout == DEFAULTS.drain_timeout


def test_bad_values_are_refused_with_their_name() -> None:
    with pytest.raises(ValueError, match="MLSERVE_MODEL_CONCURRENCY='many'"):
        ServerLimits.from_env({"MLSERVE_MODEL_CONCURRENCY": "many"})
    with pytest.raises(ValueError, match="request_timeout must be 0"):
        ServerLimits.from_env({}, request_timeout=-1)


def test_cli_flags_reach_the_limits() -> None:
    parser = argparse.ArgumentParser()
    add_limit_flags(parser)
    args = parser.parse_args(["--request-timeout", "9", "--drain-delay", "0.5"])
    limits = server_limits(args)
    assert (limits.request_timeout, limits.drain_delay) == (9.0, 0.5)
    assert limits.model_concurrency == DEFAULTS.model_concurrency


def test_gate_admits_concurrency_plus_queue_then_refuses() -> None:
    async def scenario() -> list[object]:
        gate = ModelGate(concurrency=1, queue=1)
        calls = [asyncio.ensure_future(gate.run(time.sleep, 0.3)) for _ in range(3)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(scenario())
    assert results[:2] == [None, None]
    assert isinstance(results[2], Overloaded)
    assert Overloaded.status_code == 429


def test_a_timed_out_call_keeps_its_slot_until_it_ends() -> None:
    async def scenario() -> tuple[int, int]:
        gate = ModelGate(concurrency=1, queue=0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(gate.run(time.sleep, 0.3), 0.05)
        held = gate.admitted
        await asyncio.sleep(0.5)
        return held, gate.admitted

    assert asyncio.run(scenario()) == (1, 0)


class _AsyncSleeper(V2ModelServer):
    async def predict(self, request: Any) -> Any:
        await asyncio.sleep(float(request["inputs"][0]))
        return ["slept"]


def _mock(limits: ServerLimits) -> Any:
    fn = mlserve.new_function("limits")
    fn.add_model("sleeper", class_name=_AsyncSleeper)
    server = fn.to_mock_server()
    server.limits = limits
    return server


def test_request_timeout_is_504_for_requests_but_not_for_stream_events() -> None:
    server = _mock(ServerLimits(request_timeout=0.2))
    late = server.test("/v2/models/sleeper/infer", {"inputs": [1.0]}, silent=True)
    assert late.status_code == 504
    assert late.body["error"] == "RequestTimeout: the request took longer than 0.2 s"
    streamed = server.test("/v2/models/sleeper/infer", {"inputs": [0.4]}, trigger="kafka")
    assert streamed["outputs"] == ["slept"]


def test_async_models_have_a_bounded_queue_too() -> None:
    server = _mock(ServerLimits(model_concurrency=1, model_queue=1))

    def call() -> Any:
        return server.test("/v2/models/sleeper/infer", {"inputs": [0.5]}, silent=True)

    with ThreadPoolExecutor(3) as pool:
        answers = [pool.submit(call) for _ in range(3)]
        results = [a.result() for a in answers]
    codes = sorted(
        r["outputs"] == ["slept"] if isinstance(r, dict) else r.status_code for r in results
    )
    assert codes.count(429) == 1, codes
    refused = next(r for r in results if not isinstance(r, dict))
    assert refused.headers == {"Retry-After": "1"}


def test_model_concurrency_cannot_be_0() -> None:
    with pytest.raises(ValueError, match="model_concurrency must be 1 or more"):
        ServerLimits.from_env({"MLSERVE_MODEL_CONCURRENCY": "0"})


def test_serve_with_a_bad_limit_exits_with_its_message() -> None:
    parser = argparse.ArgumentParser()
    add_limit_flags(parser)
    with pytest.raises(SystemExit, match="mlserve serve: request_timeout must be 0"):
        server_limits(parser.parse_args(["--request-timeout", "-2"]))


def test_request_timeout_holds_on_tf_serving_predict_too() -> None:
    server = _mock(ServerLimits(request_timeout=0.2))
    late = server.test("/v1/models/sleeper:predict", {"instances": [1.0]}, silent=True)
    assert late.status_code == 504, late.body
    quick = server.test("/v1/models/sleeper:predict", {"instances": [0.01]}, silent=True)
    assert quick == {"predictions": ["slept"]}


def test_deadlines_fire_once_nest_and_leave_the_task_usable() -> None:
    async def scenario() -> tuple[str, float, str]:
        started = time.monotonic()
        try:
            # the inner (longer) deadline is ignored: the outer one governs the task
            await with_timeout(with_timeout(asyncio.sleep(5), 30), 0.2)
            first = "no timeout"
        except RequestTimeout as exc:
            first = str(exc)
        took = time.monotonic() - started
        await asyncio.sleep(0.3)  # not cancelled again: the task goes on normally
        done = await with_timeout(asyncio.sleep(0.01, result="done"), 1)
        return first, took, done

    first, took, done = asyncio.run(scenario())
    assert first == "the request took longer than 0.2 s"
    assert 0.2 <= took < 0.5
    assert done == "done"


def test_a_call_answered_at_its_first_step_arms_no_deadline() -> None:
    from mlserve.core.deadlines import _deadlines_of

    async def answer() -> str:
        return "now"

    async def scenario() -> tuple[str, int, bool]:
        loop = asyncio.get_running_loop()
        answered = await with_timeout(answer(), 1)
        deadlines = _deadlines_of(loop)
        return answered, len(deadlines.tasks), deadlines.timer is None

    assert asyncio.run(scenario()) == ("now", 0, True)


def test_the_outer_deadline_outlives_an_inner_call_that_armed_first() -> None:
    async def inner_then_wait() -> str:
        # armed in the outer call's first step, and ended: the outer deadline still holds
        await with_timeout(asyncio.sleep(0.01), 30)
        await asyncio.sleep(5)
        return "no timeout"

    async def scenario() -> tuple[str, float]:
        started = time.monotonic()
        try:
            first = await with_timeout(inner_then_wait(), 0.2)
        except RequestTimeout as exc:
            first = str(exc)
        return first, time.monotonic() - started

    first, took = asyncio.run(scenario())
    assert first == "the request took longer than 0.2 s"
    assert 0.2 <= took < 0.5


def test_a_deadline_the_awaited_code_swallowed_leaves_the_task_uncancelled() -> None:
    """A task that outlives its request (a gRPC stream's, a Kafka consumer's) starts the
    next one with no cancel pending from the last deadline, even when the code swallowed
    the cancel."""

    async def stubborn() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "swallowed"
        return "slept"

    async def scenario() -> tuple[str, int, str]:
        swallowed = await with_timeout(stubborn(), 0.1)
        task = asyncio.current_task()
        assert task is not None
        left = task.cancelling()
        try:
            await with_timeout(asyncio.sleep(5), 0.1)
            second = "no timeout"
        except RequestTimeout as exc:
            second = str(exc)
        return swallowed, left, second

    swallowed, left, second = asyncio.run(scenario())
    assert swallowed == "swallowed"
    assert left == 0
    assert second == "the request took longer than 0.1 s"
