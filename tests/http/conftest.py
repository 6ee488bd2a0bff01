from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.netserver import ServerProcess, served


@pytest.fixture(scope="session")
def net_server() -> Iterator[ServerProcess]:
    """The session's real server of tests/http/fn.py (HTTP and gRPC)."""
    yield from served()
