"""The Routines page in Chromium against a real server: the owner opens it from the app's
footer at phone width, sees each routine's schedule, what it watches and what done means, its
counts and its due times one by one, pauses one and deletes another."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, Dialog, expect

from tests.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow


def test_the_owner_follows_and_manages_routines(
    contexts: Callable[..., BrowserContext], serve: Callable[..., ServerProcess]
) -> None:
    server = serve()
    with server.client() as client:
        ticking = client.post(
            "/v1/routines",
            json={"name": "tick", "prompt": "check the feed", "cron": "*/2 * * * * *"},
        ).json()
        watched = client.post(
            "/v1/routines",
            json={
                "name": "report",
                "prompt": "write the <b>report</b>",
                "cron": "0 7 * * *",
                "timezone": "Europe/Berlin",
                "watch": {"kind": "file", "target": "inbox/today.md"},
                "done_when": {"kind": "file", "path": "reports/today.md"},
                "quiet_hours": "skip",
            },
        ).json()

        def ran() -> int:
            listed = {r["id"]: r for r in client.get("/v1/routines").json()}
            return int(listed[ticking["id"]]["outcomes"]["ran"])

        wait_for(lambda: ran() >= 2, timeout=60)

    page = contexts(viewport={"width": 360, "height": 800}).new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.locator("#routines-link").click()
    expect(page).to_have_url(f"{server.url}/routines")
    routines = page.get_by_role("list", name="Routines")
    tick = routines.locator(f"li[data-id='{ticking['id']}']")
    report = routines.locator(f"li[data-id='{watched['id']}']")
    expect(tick).to_have_attribute("data-status", "active")
    expect(tick.locator(".outcomes")).to_contain_text("ran ")
    expect(report).to_contain_text("0 7 * * * (Europe/Berlin)")
    expect(report).to_contain_text("watches file inbox/today.md")
    expect(report).to_contain_text("done when it writes reports/today.md")
    expect(report).to_contain_text("skips your quiet hours")
    expect(tick).not_to_contain_text("skips your quiet hours")
    expect(report).to_contain_text("write the <b>report</b>")  # shown as text, not markup
    expect(report.locator("b")).to_have_count(0)

    tick.get_by_text("Due times").click()
    due = tick.get_by_role("list", name="Due times of tick").locator("li")
    expect(due.first).to_have_attribute("data-outcome", "ran")
    assert due.count() >= 2

    tick.get_by_role("button", name="Pause").click()
    expect(tick).to_have_attribute("data-status", "paused")
    expect(tick.get_by_role("button", name="Resume")).to_be_visible()

    def accept(dialog: Dialog) -> None:
        dialog.accept()

    page.once("dialog", accept)
    report.get_by_role("button", name="Delete").click()
    expect(report).to_have_count(0)
    with server.client() as client:
        left = {r["id"]: r["status"] for r in client.get("/v1/routines").json()}
    assert left == {ticking["id"]: "paused"}
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert problems == []
