"""A model's explain limits in-process (docs/explain.md#limits): their parameters, the
row bound (413), the explain timeout (504) and the explain queue (429), apart from
inference's."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import mlserve
from mlserve.core.explain_limits import ExplainLimits
from mlserve.core.limits import ServerLimits


class _AsyncExplainer(mlserve.V2ModelServer):
    """An explainer that takes as long as the first value of its first row says."""

    def predict(self, request: dict[str, Any]) -> Any:
        return [len(request["inputs"])]

    async def explain(self, request: dict[str, Any]) -> Any:
        await asyncio.sleep(float(request["inputs"][0][0]))
        return {"rows": len(request["inputs"])}


def _server(**params: Any) -> mlserve.GraphServer:
    fn = mlserve.new_function("explain-limits")
    fn.add_model("m", class_name=_AsyncExplainer, **params)
    return fn.to_mock_server()


def test_the_limits_come_from_the_model_parameters() -> None:
    given = {"explain_concurrency": "2", "explain_timeout": 5, "explain_max_rows": 7}
    limits = ExplainLimits.from_params(lambda key, default: given.get(key, default))
    assert limits == ExplainLimits(concurrency=2, queue=4, timeout=5.0, max_rows=7)
    assert ExplainLimits.from_params(lambda key, default: default) == ExplainLimits()


def test_a_bad_limit_names_its_parameter() -> None:
    with pytest.raises(ValueError, match="explain_max_rows='many' is not a number"):
        ExplainLimits.from_params(lambda key, default: "many" if "rows" in key else default)
    with pytest.raises(ValueError, match="explain_concurrency must be 1 or more"):
        ExplainLimits.from_params(lambda key, default: 0 if "concurrency" in key else default)


def test_more_rows_than_explain_max_rows_is_a_413_and_fewer_answer() -> None:
    server = _server(explain_max_rows=3)
    assert server.test("/v2/models/m/explain", {"inputs": [[0.0]] * 3})["outputs"] == {"rows": 3}
    refused = server.test("/v2/models/m/explain", {"inputs": [[0.0]] * 4}, silent=True)
    assert refused.status_code == 413
    assert refused.body == {
        "error": "PayloadTooLarge: an explain request may carry 3 rows at most (the model's "
        "explain_max_rows), got 4: send fewer rows per request"
    }
    tensor = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [5, 1], "data": [0.0] * 5}]}
    assert server.test("/v2/models/m/explain", tensor, silent=True).status_code == 413
    # inference has no such bound
    assert server.test("/v2/models/m/infer", {"inputs": [[0.0]] * 10})["outputs"] == [10]


def test_a_malformed_explain_request_is_a_400() -> None:
    answer = _server().test("/v2/models/m/explain", {"inputs": "rows"}, silent=True)
    assert answer.status_code == 400


def test_an_explanation_past_explain_timeout_is_a_504() -> None:
    server = _server(explain_timeout=0.2)
    late = server.test("/v2/models/m/explain", {"inputs": [[2.0]]}, silent=True)
    assert late.status_code == 504
    assert "took longer than 0.2 s" in late.body["error"]
    assert server.test("/v2/models/m/explain", {"inputs": [[0.0]]})["outputs"] == {"rows": 1}


def test_explain_timeout_is_its_own_not_the_request_timeout() -> None:
    server = _server(explain_timeout=0.2)
    server.limits = ServerLimits(request_timeout=30)
    assert server.test("/v2/models/m/explain", {"inputs": [[1.0]]}, silent=True).status_code == 504


def test_explain_calls_past_concurrency_and_queue_answer_429_with_retry_after() -> None:
    server = _server(explain_concurrency=1, explain_queue=1)

    def explain(_: int) -> Any:
        return server.test("/v2/models/m/explain", {"inputs": [[1.0]]}, silent=True)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(explain, range(4)))
    refused = [a for a in answers if not isinstance(a, dict)]
    assert len(refused) == 2, answers
    assert all(a.status_code == 429 and a.headers == {"Retry-After": "1"} for a in refused)
    assert sum(isinstance(a, dict) and a["outputs"] == {"rows": 1} for a in answers) == 2
