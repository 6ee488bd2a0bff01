"""V2 JSON carries NaN and infinities as Triton writes them (rapidjson's
kWriteNanAndInfFlag: bare ``NaN``, ``Infinity``, ``-Infinity``), both ways, by
default; ``--json-nonfinite null|string`` (or ``MLSERVE_JSON_NONFINITE``) makes every
answer strict JSON, the tensor form, rows and TF Serving's REST alike
(docs/protocol.md#nan-and-infinities)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.netserver import ServerProcess, start_server

SPECIAL = [1.5, float("nan"), float("inf"), float("-inf")]
# How each rule writes NaN, Infinity and -Infinity.
WRITTEN = {
    "literal": b"NaN,Infinity,-Infinity",
    "null": b"null,null,null",
    "string": b'"NaN","Infinity","-Infinity"',
}


@pytest.mark.parametrize(
    ("datatype", "dtype"), [("FP32", np.float32), ("FP64", np.float64), ("FP16", np.float16)]
)
def test_tritonclient_json_mode_round_trips_nan_and_inf(
    net_server: ServerProcess, datatype: str, dtype: type
) -> None:
    client = httpclient.InferenceServerClient(net_server.address)
    array = np.array(SPECIAL, dtype=dtype)
    tensor = httpclient.InferInput("t", [4], datatype)
    tensor.set_data_from_numpy(array, binary_data=False)
    outputs = [httpclient.InferRequestedOutput("t", binary_data=False)]
    got = client.infer("echo", [tensor], outputs=outputs).as_numpy("t")
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, array)  # NaN equals NaN here


def test_the_wire_holds_bare_tokens_not_null(net_server: ServerProcess) -> None:
    body = (
        b'{"inputs":[{"name":"t","datatype":"FP32","shape":[3],"data":[NaN,Infinity,-Infinity]}]}'
    )
    answer = httpx.post(f"{net_server.url}/v2/models/echo/infer", content=body)
    assert answer.status_code == 200, answer.text
    assert b'"data":[NaN,Infinity,-Infinity]' in answer.content
    data = json.loads(answer.content)["outputs"][0]["data"]
    assert np.isnan(data[0]) and data[1:] == [float("inf"), float("-inf")]


def test_bad_json_with_nan_tokens_is_still_a_400(net_server: ServerProcess) -> None:
    lone_surrogate = (
        b'{"inputs":[{"name":"t","datatype":"FP32","shape":[1],"data":[NaN]}],"id":"\\ud800"}'
    )
    for body in (
        b'{"inputs": [NaN',
        b"[" * 5000 + b"NaN" + b"]" * 5000,
        b"{NaN: 1}",
        lone_surrogate,  # orjson refuses it: the NaN reader must not let it through
    ):
        answer = httpx.post(
            f"{net_server.url}/v2/models/echo/infer",
            content=body,
            headers={"content-type": "application/json"},
        )
        assert answer.status_code == 400, (body[:20], answer.text)
        assert answer.json()["error"].startswith("InvalidInput: invalid JSON")


@pytest.fixture(scope="module", params=list(WRITTEN))
def ruled(request: pytest.FixtureRequest, net_server: ServerProcess) -> Iterator[tuple[str, str]]:
    """(rule, server URL): the default server, one told by flag, one by environment."""
    if request.param == "literal":
        yield "literal", net_server.url
        return
    if request.param == "null":
        server = start_server("--json-nonfinite", "null")
    else:
        server = start_server(env={"MLSERVE_JSON_NONFINITE": request.param})
    try:
        yield request.param, server.url
    finally:
        server.stop()


def _post(url: str, body: bytes) -> bytes:
    answer = httpx.post(url, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    json.loads(answer.content)  # every rule's answer is JSON to Python (and to Triton)
    return answer.content


def _strict(form: str, content: bytes) -> None:
    """Strict parsers refuse the default's bare tokens and take the strict rules' JSON."""
    if form == "literal":
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(content)
    else:
        orjson.loads(content)


def test_tensor_form_by_the_rule(ruled: tuple[str, str]) -> None:
    form, url = ruled
    tensor = b'{"name":"t","datatype":"FP64","shape":[4],"data":[1.5,NaN,Infinity,-Infinity]}'
    body = b'{"inputs":[' + tensor + b"]}"
    content = _post(f"{url}/v2/models/echo/infer", body)
    assert b'"data":[1.5,' + WRITTEN[form] + b"]" in content
    _strict(form, content)


def test_rows_form_by_the_rule(ruled: tuple[str, str]) -> None:
    form, url = ruled
    content = _post(f"{url}/v2/models/echo/infer", b'{"inputs":[1.5,NaN,Infinity,-Infinity]}')
    assert b'"outputs":[1.5,' + WRITTEN[form] + b"]" in content
    _strict(form, content)


def test_tfserving_rest_by_the_rule(ruled: tuple[str, str]) -> None:
    """``scale`` (tests/http/fn.py) triples x and sums each row."""
    form, url = ruled
    nan, inf, ninf = WRITTEN[form].split(b",")
    content = _post(
        f"{url}/v1/models/scale:predict", b'{"instances":[[NaN,Infinity],[-Infinity,1.5]]}'
    )
    assert content == (
        b'{"predictions":[{"scaled":[%s,%s],"total":%s},{"scaled":[%s,4.5],"total":%s}]}'
        % (nan, inf, nan, ninf, ninf)
    )
    _strict(form, content)
