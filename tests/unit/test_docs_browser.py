"""The built documentation site in a real browser: the home page renders and Material's search finds pages.

The site is built with ``mkdocs build --strict`` (as tests/unit/test_docs.py does), served over HTTP on
127.0.0.1 (Material's search runs in a web worker that fetches ``search/search_index.json``, which
``file://`` does not allow) and opened in headless Chromium (tests/browser.py; ``make browser``).
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.unit.test_docs import build_site, require_docs_toolchain

#: A term of one page, and the page Material's search must offer for it.
QUERY = "tracker"
EXPECTED_PATH = "/kafka-queue/"
#: Milliseconds any one wait in the browser may take.
WAIT_MS = 15_000


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The built site, served on a free 127.0.0.1 port for the module's tests."""
    require_docs_toolchain()
    site = tmp_path_factory.mktemp("docs-browser") / "site"
    build_site(site)
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.timeout(60)
async def test_home_page_loads_and_search_finds_a_page(site_url: str) -> None:
    from tests.browser import headless_chromium

    async with headless_chromium() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        response = await page.goto(site_url, wait_until="load", timeout=WAIT_MS)
        assert response is not None and response.ok, f"GET {site_url}: {response and response.status}"
        assert "polybroker" in await page.title()
        heading = page.locator("article h1").first
        await heading.wait_for(timeout=WAIT_MS)
        assert (await heading.inner_text()).strip().rstrip("¶").strip() == "polybroker"  # ¶: the permalink

        # Material's search box sits in the header at this width; typing runs a query per keystroke.
        box = page.locator("input.md-search__input")
        await box.click(timeout=WAIT_MS)
        await box.press_sequentially(QUERY, delay=20)
        # Results render per keystroke: wait for a link to the expected page, not for just any result.
        links = ".md-search-result__list a.md-search-result__link"
        found = await page.wait_for_function(
            """([selector, path]) => {
                const hit = [...document.querySelectorAll(selector)]
                    .find(a => new URL(a.href).pathname === path && a.offsetParent !== null);
                return hit ? hit.getAttribute("href") : null;
            }""",
            arg=[links, EXPECTED_PATH],
            timeout=WAIT_MS,
        )
        href = await found.json_value()
        assert isinstance(href, str), f"searching {QUERY!r} offered no link to {EXPECTED_PATH}"
        # A locator is resolved again when clicked, so a re-render of the list in between does no harm.
        await page.locator(f'{links}[href="{href}"]').first.click(timeout=WAIT_MS)
        await page.wait_for_url(lambda url: urlsplit(url).path == EXPECTED_PATH, timeout=WAIT_MS)
        title = page.locator("article h1").first
        await title.wait_for(timeout=WAIT_MS)
        assert "queue" in (await title.inner_text()).lower()
        assert not errors, f"JavaScript errors on the site: {errors}"

