"""Headless Chromium for the tests that look at a rendered page: Debian's ``chromium``
(``make system-deps``) driven by Playwright's sync API (the ``dev`` extra).

Playwright's own browser download needs the network, so the browser is always the
system's. One browser serves the whole test session (the ``browser`` and ``page``
fixtures in ``tests/conftest.py``).

Between two calls, Playwright's sync API leaves its own event loop marked as the
thread's running loop, so any later ``asyncio.run()`` or pytest-asyncio test in the
session would fail with "Cannot run the event loop while another loop is running".
``BrowserSession.in_use`` marks the loop only while a test uses the browser; such a
test cannot run a loop of its own in between (a browser test that needs a server runs
it in another thread or process).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser

__all__ = ["BrowserSession", "missing", "open_browser"]


def missing() -> str | None:
    """Why no browser can start here (one line), or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed: run `make install` (dev extra) and `make system-deps`"
    if shutil.which("chromium") is None:
        return "chromium is not installed: run `make system-deps`"
    return None


@contextmanager
def open_browser() -> Iterator[Browser]:
    """Debian's chromium, headless; closed (with Playwright's driver) on exit."""
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        raise RuntimeError("chromium is not installed: run `make system-deps`")
    # Chromium refuses to run as root with its sandbox on.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=args)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class BrowserSession:
    """A browser kept open across tests, with Playwright's loop unmarked between them."""

    browser: Browser
    loop: asyncio.AbstractEventLoop | None

    @classmethod
    @contextmanager
    def open(cls) -> Iterator[BrowserSession]:
        with open_browser() as browser:
            session = cls(browser, asyncio._get_running_loop())
            asyncio._set_running_loop(None)
            try:
                yield session
            finally:  # closing the browser is a Playwright call too
                asyncio._set_running_loop(session.loop)

    @contextmanager
    def in_use(self) -> Iterator[Browser]:
        asyncio._set_running_loop(self.loop)
        try:
            yield self.browser
        finally:
            asyncio._set_running_loop(None)
