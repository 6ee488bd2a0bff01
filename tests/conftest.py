"""Session fixtures: real servers, started once and stopped by PID, and a headless
browser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests import browser as browsers
from tests import services

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


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


@pytest.fixture(scope="session")
def browser_session() -> Iterator[browsers.BrowserSession]:
    """Headless Chromium, started once (tests/browser.py); skips where it is missing."""
    reason = browsers.missing()
    if reason:
        pytest.skip(reason)
    with browsers.BrowserSession.open() as session:
        yield session


@pytest.fixture
def browser(browser_session: browsers.BrowserSession) -> Iterator[Browser]:
    """The session's browser, for this test (asyncio works again after it)."""
    with browser_session.in_use() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page in its own context (no cookies or storage shared between tests)."""
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()
