"""FaceSettings from flags and environment, and the gate's pure checks."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest

from mlserve.core.events import Response
from mlserve.core.settings import FaceSettings, split_secrets
from mlserve.http import gate
from mlserve.protocol.errors import InvalidInput, PayloadTooLarge
from mlserve.server.auth import matches_any


def test_environment_fills_what_flags_leave_and_flags_win() -> None:
    env = {
        "MLSERVE_AUTH_TOKEN": "a, b,,a",
        "MLSERVE_MAX_BODY_BYTES": "1000",
        "MLSERVE_HEADER_TIMEOUT": "2.5",
        "MLSERVE_HIDE_ERRORS": "true",
        "MLSERVE_MAX_HEADERS": "",
    }
    settings = FaceSettings.from_env(env, max_body_bytes=500, max_url_bytes=None)
    assert settings.auth_tokens == ("a", "b")
    assert settings.max_body_bytes == 500
    assert settings.header_timeout == 2.5
    assert settings.hide_errors is True
    assert settings.max_headers == FaceSettings().max_headers
    assert settings.auth_enabled
    assert not FaceSettings.from_env({}).auth_enabled


def test_tokens_stay_out_of_the_repr() -> None:
    settings = FaceSettings(auth_tokens=("tok-secret",), basic_users=("u:pw-secret",))
    assert "tok-secret" not in repr(settings) and "pw-secret" not in repr(settings)


def test_split_secrets_keeps_order_and_drops_repeats() -> None:
    assert split_secrets("x,y", None, " y , z") == ("x", "y", "z")


def test_matches_any_compares_every_candidate() -> None:
    assert matches_any("b", ["a", "b"])
    assert not matches_any("c", ["a", "b"])
    assert not matches_any("", [])


def test_decoding_is_bounded_after_decompression() -> None:
    raw = b'{"inputs": [1, 2]}'
    assert gate.decode_body(gzip.compress(raw), "gzip", 100) == raw
    assert gate.decode_body(zlib.compress(raw), "deflate", 100) == raw
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    data = raw_deflate.compress(raw) + raw_deflate.flush()
    assert gate.decode_body(data, "deflate", 100) == raw
    assert gate.decode_body(raw, "identity", 100) == raw
    with pytest.raises(PayloadTooLarge):
        gate.decode_body(gzip.compress(b"0" * 10_000), "gzip", 100)
    with pytest.raises(InvalidInput):
        gate.decode_body(b"plain", "gzip", 100)


def test_compression_follows_accept_encoding() -> None:
    response = Response(b"x" * 100, 200, "application/json")
    assert gate.compress(response, "").body == response.body
    assert gate.compress(response, "br").body == response.body
    assert gate.compress(response, "gzip;q=0, deflate").headers["Content-Encoding"] == "deflate"
    zipped = gate.compress(response, "deflate, gzip")
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.body) == response.body
    error = Response(b"x" * 100, 400, "application/json")
    assert gate.compress(error, "gzip") is error  # tritonclient reads an error as it is


def test_only_inference_answers_follow_accept_encoding() -> None:
    """As Triton: aiohttp asks for gzip on every request, and tritonclient's async
    client inflates inference answers alone."""
    asked = {"accept-encoding": "gzip, deflate"}
    assert gate.accepted_encoding("/v2/models/m/infer", asked) == "gzip, deflate"
    assert gate.accepted_encoding("/v2/models/m/versions/2/infer", asked) == "gzip, deflate"
    assert gate.accepted_encoding("/v2/models/m/infer", {}) == ""
    for path in ("/v2", "/v2/models/stats", "/v2/models/m", "/v2/models/m/config",
                 "/v2/repository/index", "/v2/models/m/generate", "/v2/models/m/explain",
                 "/metrics"):  # fmt: skip
        assert gate.accepted_encoding(path, asked) == "", path


@pytest.mark.parametrize(
    ("body", "accept"),
    [
        ({"outputs": [{"name": "y", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]}, ""),
        ("text", ""),
        (b"raw", ""),
        (
            {"outputs": [{"name": "y", "datatype": "FP32", "shape": [5000], "data": [0.5] * 5000}]},
            "",
        ),
        (
            {"outputs": [{"name": "y", "datatype": "FP32", "shape": [1], "data": [1.0]}]},
            "gzip",
        ),
    ],
)
def test_encoded_is_encoded_async_when_it_need_not_suspend(body: object, accept: str) -> None:
    """The face's plain call answers what ``encoded_async`` would, or leaves it to it."""
    ready = gate.encoded(Response(body, 201, "application/json"), accept)
    full = asyncio.run(gate.encoded_async(Response(body, 201, "application/json"), accept))
    big = isinstance(body, dict) and len(body["outputs"][0]["data"]) > 4096
    if big or accept:  # big tensors go off the loop; compression may too
        assert ready is None
    else:
        assert ready is not None
        assert (ready.body, ready.status_code, ready.content_type, ready.headers) == (
            full.body,
            full.status_code,
            full.content_type,
            full.headers,
        )


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"/v2/models/a%2fb/infer", 400),
        (b"/v2/models/a%5Cb/infer", 400),
        (b"/v2/models/a%00b/infer", 400),
        (b"/v2/models/../x", 400),
        (b"/v2/models//infer", 400),
        (b"/v2/models/a%20b/infer", None),
        (b"/v2/models/m.v1/infer", None),
    ],
)
def test_targets_that_could_leave_their_place(raw: bytes, status: int | None) -> None:
    from urllib.parse import unquote

    refused = gate.check_target(raw, unquote(raw.decode()))
    assert (refused.status_code if refused else None) == status
