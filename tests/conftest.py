"""Session fixtures: real servers, started once and stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import services


@pytest.fixture(scope="session")
def kafka() -> Iterator[services.ProcessService]:
    broker = services.start_kafka()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[services.ProcessService]:
    server = services.start_redis()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[services.Service]:
    server = services.start_postgres()
    yield server
    server.stop()
