"""The first run as a new user sees it: the empty conversation says which model answers and
whether it is ready, offers requests to try, and links the inbox and the settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.server import ServerProcess, say, write_script

pytestmark = pytest.mark.slow


def _first_page(context: BrowserContext, server: ServerProcess) -> Page:
    page = context.new_page()
    page.goto(f"{server.url}/#token={server.token}")  # the link `make run` prints
    # On a phone the welcome takes the screen and the sidebar (where the connection shows) hides.
    page.wait_for_selector("#connection[data-state=live]", state="attached")
    return page


def test_the_first_screen_says_who_answers_and_offers_requests_that_work(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    # No model: the first screen says plainly that no reply will come, and how to fix it.
    silent = _first_page(contexts(viewport={"width": 390, "height": 844}), serve())
    welcome = silent.locator("#welcome")
    expect(welcome).to_be_visible()
    expect(welcome.locator(".model-state")).to_have_text("no model configured")
    expect(welcome).to_contain_text("no reply will come")
    expect(welcome).to_contain_text("NIGHTOWL_MODEL")
    expect(welcome.locator("button.example")).to_have_count(3)
    expect(welcome.get_by_role("link", name="Inbox: what waits on you")).to_be_visible()
    welcome.get_by_role("link", name="Settings: notifications, tokens").click()
    expect(silent.locator("#settings")).to_be_visible()
    expect(silent.locator("#settings")).to_contain_text("nightowl token create")

    # A model that answers: "ready", and an example request gets its reply.
    model = write_script(tmp_path / "script.json", [say("Hoot! Here is a poem.", final=True)])
    page = _first_page(contexts(viewport={"width": 1280, "height": 800}), serve(model))
    welcome = page.locator("#welcome")
    expect(welcome.locator(".model-state")).to_have_text("ready")
    expect(welcome).to_contain_text("scripted:")
    welcome.locator("button.example").nth(1).click()
    expect(page.locator("li.msg.own", has_text="poem about owls")).to_be_visible()
    expect(page.locator("li.msg.agent", has_text="Hoot! Here is a poem.")).to_be_visible()
    expect(welcome).to_be_hidden()
