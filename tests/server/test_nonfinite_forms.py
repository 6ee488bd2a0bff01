"""NaN and infinities through the mock server, one rule for every form
(docs/protocol.md#nan-and-infinities): a V2 tensor answer, a rows answer and TF
Serving's REST answers write them the same way under each rule, and the model-log
stream writes strict JSON (null) under all of them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

import mlserve
from mlserve.protocol.nonfinite import FORMS, set_json_nonfinite
from mlserve.server.graph_server import GraphServer

SPECIAL = [1.5, float("nan"), float("inf"), float("-inf")]
# How each rule writes the four SPECIAL values, and how a client reads them back.
WIRE = {
    "literal": b"[1.5,NaN,Infinity,-Infinity]",
    "null": b"[1.5,null,null,null]",
    "string": b'[1.5,"NaN","Infinity","-Infinity"]',
}
READ = {
    "literal": SPECIAL,
    "null": [1.5, None, None, None],
    "string": [1.5, "NaN", "Infinity", "-Infinity"],
}
ROWS = {"inputs": [[1.0, 2.0, 3.0, 4.0]]}
TENSORS = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": SPECIAL}]}


class Special(mlserve.V2ModelServer):
    """Answers the SPECIAL values: an FP32 tensor to a tensor request, rows to rows."""

    def predict(self, request: dict[str, Any]) -> Any:
        values = np.array(SPECIAL, dtype=np.float32)
        return values if getattr(request, "tensors", None) is not None else values.tolist()


@pytest.fixture(params=FORMS)
def form(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each rule in turn, the process's own put back afterwards."""
    previous = set_json_nonfinite(request.param)
    try:
        yield request.param
    finally:
        set_json_nonfinite(previous)


def _function(stream: Path | None = None) -> mlserve.ServingFunction:
    fn = mlserve.new_function("nonfinite")
    fn.add_model(
        "special",
        class_name=Special,
        inputs=[{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        outputs=[{"name": "y", "datatype": "FP32", "shape": [4]}],
    )
    if stream is not None:
        fn.set_tracking(str(stream))
    return fn


@pytest.fixture(scope="module")
def server() -> GraphServer:
    return _function().to_mock_server()


def _same(read: list[Any], form: str) -> None:
    """``read`` is what the client of ``form`` gets for SPECIAL (NaN never equals NaN)."""
    assert json.dumps(read) == json.dumps(READ[form])


def _wire(server: GraphServer, path: str, body: object) -> bytes:
    response = server.test(path, body, get_body=False)
    assert response.status_code == 200, response.body
    return bytes(response.body)


def test_tensor_form(server: GraphServer, form: str) -> None:
    wire = _wire(server, "/v2/models/special/infer", TENSORS)
    assert b'"datatype":"FP32","shape":[4],"data":' + WIRE[form] + b"}" in wire
    _same(server.test("/v2/models/special/infer", TENSORS)["outputs"][0]["data"], form)


def test_rows_form(server: GraphServer, form: str) -> None:
    assert b'"outputs":' + WIRE[form] in _wire(server, "/v2/models/special/infer", ROWS)
    _same(server.test("/v2/models/special/infer", ROWS)["outputs"], form)


@pytest.mark.parametrize(("key", "answer"), [("instances", "predictions"), ("inputs", "outputs")])
def test_tfserving_rest(server: GraphServer, form: str, key: str, answer: str) -> None:
    body = {key: [[1.0, 2.0, 3.0, 4.0]]}
    wire = _wire(server, "/v1/models/special:predict", body)
    assert wire == b'{"%s":%s}' % (answer.encode(), WIRE[form])
    _same(server.test("/v1/models/special:predict", body)[answer], form)


def test_strict_rules_are_strict_json(server: GraphServer, form: str) -> None:
    for path, body in [
        ("/v2/models/special/infer", TENSORS),
        ("/v2/models/special/infer", ROWS),
        ("/v1/models/special:predict", {"instances": ROWS["inputs"]}),
    ]:
        wire = _wire(server, path, body)
        if form == "literal":
            with pytest.raises(orjson.JSONDecodeError):
                orjson.loads(wire)
        else:
            orjson.loads(wire)


def test_the_model_log_stream_is_strict_json_under_every_rule(tmp_path: Path, form: str) -> None:
    path = tmp_path / "model-logs.jsonl"
    server = _function(path).to_mock_server()
    try:
        server.test("/v2/models/special/infer", TENSORS)  # NaN in and out
        server.test("/v2/models/special/infer", ROWS)
    finally:
        server.wait_for_completion()
    tensors, rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    nulls = [1.5, None, None, None]
    assert tensors["request"]["inputs"] == [nulls] and tensors["resp"]["outputs"] == nulls
    assert rows["request"]["inputs"] == ROWS["inputs"] and rows["resp"]["outputs"] == nulls
