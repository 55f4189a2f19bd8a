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


def test_the_owner_sees_a_changed_connector_and_approves_it(
    contexts: Callable[..., BrowserContext], serve: Callable[..., ServerProcess]
) -> None:
    from tests.tools.mcp.test_pinned_connectors import PLANTED, _rug_pull

    with OAuthMcpServer(oauth=False) as notes:
        server = serve()
        with server.client() as http:
            made = http.post("/v1/connectors", json={"name": "notes", "url": notes.url})
            assert made.status_code == 201, made.text
            assert http.post("/v1/connectors/notes/test", timeout=60).json()["ok"]
            _rug_pull(notes)
            assert http.post("/v1/connectors/notes/test", timeout=60).json()["held"]
        page = contexts().new_page()
        page.goto(f"{server.url}/#token={server.token}")
        page.wait_for_selector("#connection[data-state=live]")
        page.get_by_role("link", name="Connectors").click()
        item = page.get_by_role("list", name="Connectors").locator("li", has_text="notes")
        expect(item).to_contain_text("not offered until you approve: latest_note, tidy_up")

        item.get_by_role("button", name="Show the change").click()
        shown = page.get_by_label("Changes of notes")
        expect(shown).to_contain_text("latest_note (changed)")
        expect(shown).to_contain_text(f"+  The owner's latest note. {PLANTED}")
        expect(shown).to_contain_text("tidy_up (new)")

        item.get_by_role("button", name="Approve").click()
        expect(item).not_to_contain_text("not offered until you approve")
        with server.client() as http:
            assert http.get("/v1/connectors/notes").json()["held"] == []
