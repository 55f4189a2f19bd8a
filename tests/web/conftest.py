"""Playwright driving Debian's Chromium against a real `nightowl serve` process."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.databases import seed_data_dir
from tests.server import ServerProcess

ARTIFACTS = Path(os.environ.get("NIGHTOWL_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts"))
# As root, in a container with a closed network: no sandbox, and no background connections.
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


# How long an `expect` waits for the page to show what it should: a bound, not a speed check
# (test processes run side by side on 2 cores; a turn with a scripted model can take seconds).
expect.set_options(timeout=20_000)


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise RuntimeError("Debian's chromium is missing; `make test` installs it")
    return path


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
    )
    yield launched
    launched.close()


@pytest.fixture
def contexts(browser: Browser) -> Iterator[Callable[..., BrowserContext]]:
    """Make browser contexts (separate devices: own storage, own connections)."""
    made: list[BrowserContext] = []

    def make(**options: Any) -> BrowserContext:
        context = browser.new_context(**options)
        context.set_default_timeout(15_000)
        made.append(context)
        return context

    yield make
    for context in made:
        context.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers on SQLite stores copied from a migrated template (stopped at the end
    of the test)."""
    started: list[ServerProcess] = []

    def start(model: str = "none", **kwargs: Any) -> ServerProcess:
        data_dir = tmp_path / f"data{len(started)}"
        if not kwargs.get("database_url"):
            seed_data_dir(data_dir)  # a migrated store: its first start migrates nothing
        server = ServerProcess(data_dir, model=model, **kwargs)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def open_app(context: BrowserContext, server: ServerProcess, conversation_id: str) -> Page:
    """A page signed in through the link `make run` prints, on one conversation."""
    page = context.new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.goto(f"{server.url}/#c={conversation_id}")
    page.wait_for_selector("#composer:not([hidden])")
    page.wait_for_selector("#messages[aria-busy=false]", state="attached")  # first fetch done
    return page


def start_conversation(server: ServerProcess) -> str:
    with server.client() as http:
        created = http.post("/v1/conversations", json={"kind": "direct"})
        assert created.status_code == 201, created.text
        return str(created.json()["id"])


def wait_in_page(page: Page, predicate: Callable[[], Any], timeout: float = 30) -> Any:
    """Poll `predicate` like `tests.server.wait_for`, pausing inside Playwright between polls.

    The sync API runs a route handler only while the test is inside a Playwright call; a
    `time.sleep` between polls would hold back the very request the test waits for.
    """
    waited = 0.0
    while waited < timeout:
        value = predicate()
        if value:
            return value
        page.wait_for_timeout(200)
        waited += 0.2
    raise AssertionError(f"condition not met within {timeout}s")
