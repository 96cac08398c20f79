"""The console in a real browser: Debian's Chromium driven by Playwright, against the API server actor on the
session's Ray cluster (cuberay/console/service.py, as `cuberay up` starts it) over the test's controller.

Chromium comes from the system (`apt-get install chromium`, which .ci/run does); Playwright's own browser
download is never used. Every page a test opens records what the browser did: requests to any host but
127.0.0.1, JavaScript errors and console errors, which :meth:`Console.assert_clean` turns into a failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlparse

import pytest

CHROMIUM = os.environ.get("CUBERAY_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 30_000  # how long a page may take to show what a test waits for (it refreshes every second)


@dataclass
class Console:
    url: str
    token: str
    browser: Any
    seen: list[str] = field(default_factory=list)       # every request's URL
    problems: list[str] = field(default_factory=list)   # JS errors, console errors, requests elsewhere

    def page(self, user: str | None = None) -> Any:
        """A new browser context (its own cookies) on the console, signed in as ``user`` unless None."""
        context = self.browser.new_context(viewport={"width": 1280, "height": 860})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("request", self._request)
        page.on("pageerror", lambda err: self.problems.append(f"JavaScript error: {err}"))
        page.on("console", lambda msg: msg.type == "error" and self.problems.append(f"console error: {msg.text}"))
        page.goto(self.url + "/")
        if user is not None:
            page.fill("#token", self.token)
            page.fill("#user", user)
            page.click("button[type=submit]")
            page.wait_for_selector(f"#who:has-text('signed in as {user}')")
        return page

    def _request(self, request: Any) -> None:
        self.seen.append(request.url)
        host = urlparse(request.url).hostname
        if request.url.startswith(("http:", "https:", "ws:")) and host != "127.0.0.1":
            self.problems.append(f"a request left 127.0.0.1: {request.url}")

    def expect_refusals(self, at_least: int) -> None:
        """A refused call (403) is a failed resource load to Chromium, which logs it as a console error: a test
        that has calls refused on purpose takes those out of the problems (and there must be as many as it made)."""
        refused = [p for p in self.problems if "status of 403" in p]
        assert len(refused) >= at_least, self.problems
        self.problems[:] = [p for p in self.problems if p not in refused]

    def assert_clean(self) -> None:
        assert self.seen, "the browser made no request at all"
        assert not self.problems, "\n".join(self.problems)


def screenshot(page: Any, name: str, where: Path) -> Path:
    """The page's picture in ``where``, or, with CUBERAY_SCREENSHOTS=DIR, in DIR (the README's come from there)."""
    where = Path(os.environ.get("CUBERAY_SCREENSHOTS") or where)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.png"
    page.screenshot(path=str(path))
    return path


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A headless Chromium for one test. Not shared wider: while Playwright's sync API is open, its event loop
    counts as running in this thread, and sync calls that refuse to run inside one (Ray Serve's handles,
    ``asyncio.run``) would fail in every test after it."""
    if not shutil.which(CHROMIUM):
        pytest.fail(f"the console's browser tests need Chromium at {CHROMIUM}: `apt-get install -y chromium` "
                    f"(.ci/run installs it), or set CUBERAY_CHROMIUM to another Chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def serve_console(ray_cluster: Any, chromium: Any) -> Iterator[Console]:
    """The head's API server actor on the session cluster (the console's server), removed afterwards."""
    import ray

    from cuberay.console import service
    from cuberay.platform.control.head import API_NAME, NAMESPACE, free_port

    token = os.environ["RAY_AUTH_TOKEN"]  # the session cluster's token (tests/integration/conftest.py)
    url = service.start(ray_cluster.head_node_id, free_port(), token)
    try:
        yield Console(url, token, chromium)
    finally:
        ray.kill(ray.get_actor(API_NAME, namespace=NAMESPACE))
