"""The connectors page in Chromium against a real server: the owner adds a connector reached
by URL with OAuth, tests it (it says what to do), authorises it in the browser, tests it
again (it works) and removes it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import ServerProcess
from tests.tools.mcp.oauth_server import OAuthMcpServer

pytestmark = pytest.mark.slow


def test_the_owner_adds_tests_authorises_and_removes_a_connector(
    contexts: Callable[..., BrowserContext], serve: Callable[..., ServerProcess]
) -> None:
    with OAuthMcpServer() as notes:
        server = serve()
        context = contexts()
        page = context.new_page()
        page.goto(f"{server.url}/#token={server.token}")
        page.wait_for_selector("#connection[data-state=live]")
        page.get_by_role("link", name="Connectors").click()
        listed = page.get_by_role("list", name="Connectors")
        expect(listed).to_contain_text("No connectors yet.")

        page.get_by_label("Name").fill("notes")
        page.get_by_label("Command or URL").fill(notes.url)
        page.get_by_label("What it is for").fill("My notes.")
        page.get_by_label("uses OAuth").check()
        page.get_by_role("button", name="Add").click()
        item = listed.locator("li", has_text="notes")
        expect(item).to_contain_text("new · 0 tools · untrusted output")
        expect(item).to_contain_text("My notes.")

        # Not authorised yet: the test says what failed and what to do.
        item.get_by_role("button", name="Test").click()
        expect(item.get_by_role("status")).to_contain_text("Failed:")
        expect(item.get_by_role("status")).to_contain_text("Authorise nightowl with the server")

        item.get_by_role("button", name="Authorise").click()
        link = item.get_by_role("link", name="Open the service to authorise nightowl")
        expect(link).to_be_visible()
        service = context.new_page()  # the owner follows the link; the service sends them back
        service.goto(str(link.get_attribute("href")))
        expect(service.locator("#result")).to_contain_text("nightowl may now use notes (1 tools)")

        item.get_by_role("button", name="Test").click()
        expect(item.get_by_role("status")).to_contain_text("Works: 1 tools.")
        expect(item.get_by_role("status")).to_contain_text("notes_latest_note")
        expect(item).to_contain_text("ok · 1 tools")

        item.get_by_role("button", name="Remove").click()
        expect(listed).to_contain_text("No connectors yet.")
