"""Request targets (docs/security.md#model-control-off-by-default): what is refused, and
the cache of allowed targets never lets a refused one through."""

from __future__ import annotations

import pytest

from mlserve.protocol import names
from mlserve.protocol.names import target_error

SEPARATORS = "encoded separators and NUL are not allowed in a request path"
DOTS = "'..', '.' and empty names are not allowed in a request path"


@pytest.mark.parametrize(
    ("raw", "path", "error"),
    [
        (b"/v2/models/m/infer", "/v2/models/m/infer", None),
        (b"/v2/models/m.v1/infer", "/v2/models/m.v1/infer", None),
        (b"/v2/models/a%20b/infer", "/v2/models/a b/infer", None),
        (b"/v2/models/..%2fx/infer", "/v2/models/../x/infer", SEPARATORS),
        (b"/v2/models/a%5Cb", "/v2/models/a\\b", SEPARATORS),
        (b"/v2/models/a%00", "/v2/models/a\x00", SEPARATORS),
        (b"/v2/models/../x", "/v2/models/../x", DOTS),
        (b"/v2/models/./x", "/v2/models/./x", DOTS),
        (b"/v2//models", "/v2//models", DOTS),
        (b"/v1/models/..:predict", "/v1/models/..:predict", DOTS),
        (b"/v1/models/%2e%2e:predict", "/v1/models/..:predict", DOTS),
        (b"/v1/models/m/versions/.:predict", "/v1/models/m/versions/.:predict", DOTS),
        (b"/v2/models/..:1/infer", "/v2/models/..:1/infer", DOTS),
        (b"/v2/models/m:../infer", "/v2/models/m:../infer", DOTS),
        (b"/v1/models/m:predict", "/v1/models/m:predict", None),
        (b"/v2/models/m:1/infer", "/v2/models/m:1/infer", None),
        (b"/v2/models/m:.v1/infer", "/v2/models/m:.v1/infer", None),
    ],
)
def test_targets(raw: bytes, path: str, error: str | None) -> None:
    for _ in range(2):  # the second time from the cache, when allowed
        assert target_error(raw, path) == error


def test_an_allowed_raw_target_does_not_allow_another_decoded_path() -> None:
    assert target_error(b"/v2/models/q/infer", "/v2/models/q/infer") is None
    assert target_error(b"/v2/models/q/infer", "/v2/models/../infer") == DOTS


def test_a_bytearray_target_is_checked_too() -> None:
    assert target_error(bytearray(b"/v2/models/b/infer"), "/v2/models/b/infer") is None
    assert target_error(bytearray(b"/v2/models/b/infer"), "/v2/models/./infer") == DOTS


def test_the_cache_of_allowed_targets_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(names, "_ALLOWED", {})
    for index in range(names._ALLOWED_MAX + 10):
        path = f"/v2/models/m{index}/infer"
        assert target_error(path.encode(), path) is None
    assert len(names._ALLOWED) == names._ALLOWED_MAX
    assert target_error(b"/v2/models/../infer", "/v2/models/../infer") == DOTS
