"""The one rule for NaN and infinities in answers (docs/protocol.md#nan-and-infinities):
``dumps`` writes them as the process's rule says wherever they sit in an answer,
``dumps_strict`` (the model-log stream) writes null always, finite answers are
orjson's own bytes."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest

from mlserve.core.settings import FaceSettings
from mlserve.protocol.nonfinite import FORMS, json_nonfinite, set_json_nonfinite
from mlserve.protocol.tensors import (
    NUMPY_OUTPUT_SIZE,
    dumps,
    dumps_lossless,
    dumps_strict,
    encode_tensor,
    loads,
)

# What each rule writes for NaN, Infinity and -Infinity.
WRITTEN = {
    "literal": (b"NaN", b"Infinity", b"-Infinity"),
    "null": (b"null", b"null", b"null"),
    "string": (b'"NaN"', b'"Infinity"', b'"-Infinity"'),
}
SPECIAL = [float("nan"), float("inf"), float("-inf")]


@pytest.fixture(params=FORMS)
def form(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each rule in turn, the process's own put back afterwards."""
    previous = set_json_nonfinite(request.param)
    try:
        yield request.param
    finally:
        set_json_nonfinite(previous)


def _list(form: str) -> bytes:
    return b"[" + b",".join(WRITTEN[form]) + b"]"


def test_the_default_is_literal_as_triton_writes() -> None:
    assert json_nonfinite() == "literal"
    assert FaceSettings().json_nonfinite == "literal"


@pytest.mark.parametrize(
    "value",
    [
        SPECIAL,
        tuple(SPECIAL),
        np.array(SPECIAL, np.float32),
        np.array(SPECIAL, np.float16),
        np.array(SPECIAL, np.float64).astype(">f8"),  # orjson refuses it: the fallback writes it
        [np.float32("nan"), np.float64("inf"), np.float16("-inf")],
    ],
    ids=["list", "tuple", "fp32", "fp16", "big-endian", "numpy-scalars"],
)
def test_every_container_writes_the_rule(form: str, value: object) -> None:
    assert dumps({"outputs": value}) == b'{"outputs":' + _list(form) + b"}"


def test_nested_rows_tensors_and_leftovers(form: str) -> None:
    nan, inf, ninf = WRITTEN[form]
    body = {
        "rows": [{"score": float("nan")}, [1.5, float("inf")]],
        "matrix": np.array([[float("-inf"), 2.0]]),
        "pair": complex(float("nan"), 1.0),  # written by _default as [real, imag]
        "none": None,  # a real null stays null
        "text": "null NaN",
    }
    expected = (
        b'{"rows":[{"score":%s},[1.5,%s]],"matrix":[[%s,2.0]],"pair":[%s,1.0],'
        b'"none":null,"text":"null NaN"}' % (nan, inf, ninf, nan)
    )
    assert dumps(body) == expected


def test_tensor_outputs_small_and_big(form: str) -> None:
    for size in (5, 100, NUMPY_OUTPUT_SIZE):
        array = np.arange(size, dtype=np.float32)
        array[1:4] = SPECIAL
        data = dumps(encode_tensor("y", array)).partition(b'"data":[')[2]
        assert data.startswith(b"0.0," + b",".join(WRITTEN[form]) + b",4.0")


def test_the_answer_is_left_untouched(form: str) -> None:
    body = {"outputs": [{"data": [float("nan"), 1.0]}], "array": np.array([np.inf])}
    kept = copy.deepcopy(body)
    dumps(body)
    assert str(body) == str(kept) and body["array"].dtype == np.float64


def test_finite_answers_are_orjsons_own_bytes(form: str) -> None:
    body = {"id": None, "outputs": [1.5, -0.0, 2, "NaN", {"a": [None]}], "x": np.ones(3)}
    assert dumps(body) == orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize(
    "text",
    [[], ["unusual uu"] * 10, ["null"] * 3, ["u", None]],
    ids=["numbers", "many-u", "null-strings", "a-null"],
)
def test_long_answers_are_searched_as_short_ones(form: str, text: list[Any]) -> None:
    """Past 2 KiB the search for null goes by memchr from "u" to "u"."""
    body = {"text": text, "outputs": [*range(1000), float("nan")]}
    assert len(orjson.dumps(body)) > 2048
    assert dumps(body) == orjson.dumps(body)[: -len(b"null]}")] + WRITTEN[form][0] + b"]}"
    finite = {"text": text, "outputs": list(range(1000))}
    assert dumps(finite) == orjson.dumps(finite)


def test_what_a_client_reads_back(form: str) -> None:
    read = loads(dumps({"outputs": SPECIAL}))["outputs"]
    if form == "literal":
        assert np.isnan(read[0]) and read[1:] == SPECIAL[1:]
    else:
        assert read == orjson.loads(_list(form))  # null, or the three strings
        assert orjson.loads(dumps({"outputs": SPECIAL}))  # a strict parser takes it


def test_strict_json_is_null_whatever_the_rule(form: str) -> None:
    body = {"resp": {"outputs": [SPECIAL, np.array(SPECIAL)]}, "metrics": {"m": np.nan}}
    data = dumps_strict(body)
    assert orjson.loads(data) == {
        "resp": {"outputs": [[None] * 3, [None] * 3]},
        "metrics": {"m": None},
    }


def test_hops_between_graph_steps_keep_the_numbers_whatever_the_rule(form: str) -> None:
    """Queues and remote steps write bare tokens: the next step reads NaN back, not null."""
    body = {"inputs": [SPECIAL, np.array(SPECIAL)], "none": None}
    data = dumps_lossless(body)
    assert data == b'{"inputs":[' + _list("literal") + b"," + _list("literal") + b'],"none":null}'
    read = loads(data)
    assert np.isnan(read["inputs"][1][0]) and read["inputs"][1][1:] == SPECIAL[1:]
    assert dumps_lossless({"finite": [1.5]}) == b'{"finite":[1.5]}'


def test_an_unknown_rule_is_refused_and_changes_nothing() -> None:
    with pytest.raises(ValueError, match="must be one of literal, null, string, not 'nan'"):
        set_json_nonfinite("nan")
    assert json_nonfinite() == "literal"


def test_settings_read_the_rule_from_flag_or_environment() -> None:
    env = {"MLSERVE_JSON_NONFINITE": "string"}
    assert FaceSettings.from_env(env).json_nonfinite == "string"
    assert FaceSettings.from_env(env, json_nonfinite="null").json_nonfinite == "null"
    with pytest.raises(ValueError, match="MLSERVE_JSON_NONFINITE.*not 'NULL'"):
        FaceSettings.from_env({"MLSERVE_JSON_NONFINITE": "NULL"})
