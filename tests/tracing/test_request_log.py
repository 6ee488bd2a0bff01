"""``mlserve.core.request_log`` alone: which id names a request, which model a line is
about, and the JSON formatter's object."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import pytest

from mlserve.core import request_log, tracing
from mlserve.core.events import Event


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"id": "req-1", "inputs": [1]}, "req-1"),
        ({"inputs": [1]}, None),
        ({"id": "", "inputs": [1]}, None),
        ({"id": 7, "inputs": [1]}, None),  # a V2 id is a string
        ({"id": "a\r\nb"}, None),
        ({"id": "x" * 129}, None),
        (b'{"id": "not parsed yet"}', None),
        (None, None),
    ],
)
def test_request_id_is_the_v2_id_or_the_events(body: object, expected: str | None) -> None:
    event = Event(body=body, path="/v2/models/m/infer")
    assert request_log.request_id(event) == (expected or event.id)


def test_model_of_a_path_or_a_body() -> None:
    assert request_log.model_of("/v2/models/m/versions/2/infer") == "m"
    assert request_log.model_of("/v2/models/") is None
    assert request_log.model_of("/", Event(body={"model": "k", "inputs": []})) == "k"
    assert request_log.model_of("/v2/health/ready") is None


def _record(message: str, exc_info: Any = None) -> logging.LogRecord:
    return logging.LogRecord("tests.log", logging.ERROR, __file__, 1, message, (), exc_info)


def test_the_json_line_names_the_request_being_answered() -> None:
    formatter = request_log.JsonFormatter()
    plain = json.loads(formatter.format(_record("no request")))
    assert set(plain) == {"time", "level", "logger", "message"}
    assert plain["level"] == "error" and plain["logger"] == "tests.log"
    event = Event(body={"id": "r-9", "inputs": [1]}, path="infer")  # the router rewrote it
    token = request_log.current.set((event, "/v2/models/m/infer"))
    try:
        try:
            raise ValueError("bad")
        except ValueError:
            line = json.loads(formatter.format(_record("failed %s", sys.exc_info())))
    finally:
        request_log.current.reset(token)
    assert (line["request_id"], line["model"]) == ("r-9", "m")
    assert line["exc_info"].startswith("Traceback") and "ValueError: bad" in line["exc_info"]
    assert "trace_id" not in line and not tracing.on


def test_configure_turns_the_access_log_and_the_context_on_and_off() -> None:
    try:
        request_log.configure("text", access_log=True)
        assert request_log.access and request_log.track and tracing.carry
        assert request_log.access_logger.isEnabledFor(logging.INFO)
    finally:
        request_log.configure("text", access_log=False)
    assert not (request_log.access or request_log.track or tracing.carry)
    assert not request_log.access_logger.isEnabledFor(logging.INFO)
