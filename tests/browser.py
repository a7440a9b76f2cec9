"""A real headless browser for tests: Debian's Chromium driven by Playwright.

``make test`` installs Chromium from Debian (``make browser``); Playwright's own browser downloads
are never used. A test that needs a browser and finds no Chromium fails with a message saying how
to install it, rather than skipping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator

from playwright.async_api import Browser, async_playwright


def chromium_path() -> str:
    """Where Debian's Chromium is (``$CHROMIUM`` overrides); an AssertionError if it is missing."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "no Chromium on PATH: run `make browser` (apt-get install chromium)"
    return path


@contextlib.asynccontextmanager
async def headless_chromium() -> AsyncIterator[Browser]:
    """``async with headless_chromium() as browser: page = await browser.new_page()``."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            await browser.close()
