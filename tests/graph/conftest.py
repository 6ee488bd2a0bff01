from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.graph import models


@pytest.fixture(autouse=True)
def clear_seen() -> Iterator[None]:
    models.seen.clear()
    yield
    models.seen.clear()


@pytest.fixture(params=["sync", "async"])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)
