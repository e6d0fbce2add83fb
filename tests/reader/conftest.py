"""Shared fixtures for the reader-experience tests: the built site, a local HTTP server, and Chromium.

These tests run after the site is built (``make test`` builds it first). They need Debian's Chromium
(``apt-get install chromium``; ``.ci/run`` installs it). Without it they are skipped with a message saying so,
except under CI (``CI=true``), where a missing browser is a failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# Flags for a closed network: without the background-networking ones Chromium keeps trying to reach Google.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
LOOPBACK = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")


def _require(condition: bool, what: str, how: str) -> None:
    if condition:
        return
    message = f"{what} -- this check did NOT run. To enable it: {how}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def site() -> Path:
    _require((SITE / "index.html").is_file(), f"no built site at {SITE}", "run `make book` (or `make test`) first")
    return SITE


@pytest.fixture(scope="session")
def browser():
    _require(
        Path(CHROMIUM).is_file() or shutil.which(CHROMIUM) is not None,
        f"Chromium not found at {CHROMIUM}",
        "`sudo apt-get install chromium` (or set CHROMIUM=/path/to/chromium)",
    )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="session")
def site_url(site: Path) -> Iterator[str]:
    """Serve the built site on 127.0.0.1 (a free port) for the session."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def guard_network(context, attempted: list[str]) -> None:
    """Abort every request that would leave the machine, and remember it."""

    def handle(route):
        url = route.request.url
        if url.startswith(LOOPBACK):
            route.continue_()
        else:
            attempted.append(url)
            route.abort()

    context.route("**/*", handle)
