"""The inbox in the browser: what waits across conversations, answered in place, updated live
on every open page; the title carries the count (phone and desktop sizes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.safety.helpers import do
from tests.server import ServerProcess, say, wait_for, write_script
from tests.web.conftest import ARTIFACTS, open_app

pytestmark = pytest.mark.slow

SCRIPT = [{"obey": True}, say("Booked: 9:00 to Leeds.", final=True)]
ASKS = {
    "Trip": do(
        "send_to_user",
        text="May I book the **9:00** train to Leeds (£42)?",
        buttons=[{"label": "Approve", "value": "yes"}, {"label": "Deny", "value": "no"}],
        ask="approval",
        important=True,
    ),
    "Mail to Sam": do(
        "send_to_user", text="Here is a reply to Sam:", draft="Hi Sam, Tuesday works for me."
    ),
    "Drinks": do(
        "send_to_user",
        text="Tea or coffee for the meeting?",
        buttons=[{"label": "Tea", "value": "tea"}, {"label": "Coffee", "value": "coffee"}],
    ),
}


def _open_inbox(context: BrowserContext, server: ServerProcess) -> Page:
    page = context.new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.goto(f"{server.url}/#inbox")
    page.wait_for_selector("#inbox:not([hidden])")
    return page


def test_the_inbox_lists_three_conversations_answers_in_place_and_updates_live(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    server = serve(write_script(tmp_path / "script.json", SCRIPT))
    conversations: dict[str, str] = {}
    with server.client() as http:
        for title, text in ASKS.items():
            made = http.post("/v1/conversations", json={"title": title}).json()
            conversations[title] = made["id"]
            sent = http.post(
                f"/v1/conversations/{made['id']}/messages", json={"client_id": "c1", "text": text}
            )
            assert sent.status_code == 201, sent.text
        wait_for(lambda: http.get("/v1/inbox").json()["total"] == 3)

    laptop = _open_inbox(contexts(viewport={"width": 1280, "height": 800}), server)
    phone = _open_inbox(contexts(viewport={"width": 390, "height": 844}), server)
    for page in (laptop, phone):
        items = page.locator("#inbox-list li.inbox-item")
        expect(items).to_have_count(3)
        for title in ASKS:
            expect(page.locator("li.inbox-item .inbox-where", has_text=title)).to_be_visible()
        expect(page.locator("li.inbox-item.approval .badge.kind")).to_have_text("Approval")
        expect(page.locator("li.inbox-item.draft textarea.draft")).to_have_value(
            "Hi Sam, Tuesday works for me."
        )
        expect(page).to_have_title("(3) nightowl")
        expect(page.locator("#inbox-count")).to_have_text("3")

    shots = ARTIFACTS / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    for name, page in (("inbox-desktop", laptop), ("inbox-phone", phone)):
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        assert (shots / f"{name}.png").stat().st_size > 10_000

    # Approve in the inbox on the laptop: the action runs once; both pages drop the item.
    laptop.locator("li.inbox-item.approval").get_by_role("button", name="Approve").click()
    for page in (laptop, phone):
        expect(page.locator("li.inbox-item.approval")).to_have_count(0)
        expect(page.locator("#inbox-list li.inbox-item")).to_have_count(2)
        expect(page).to_have_title("(2) nightowl")
    trip = conversations["Trip"]
    with server.client() as http:

        def booked() -> int:
            page = http.get(f"/v1/conversations/{trip}/messages").json()
            return sum(m["body"] == "Booked: 9:00 to Leeds." for m in page["messages"])

        wait_for(lambda: booked() == 1)
        assert booked() == 1

    # Answered in its conversation on a third page: gone from the phone's inbox, live (no reload).
    drinks = open_app(contexts(), server, conversations["Drinks"])
    drinks.get_by_role("button", name="Tea").click()
    expect(drinks.locator(".control-status")).to_have_text("Answered: Tea")
    expect(phone.locator("li.inbox-item.question")).to_have_count(0)
    expect(phone).to_have_title("(1) nightowl")

    # A link opens the item in its conversation.
    phone.locator("li.inbox-item.draft .inbox-where").click()
    expect(phone.locator("#conversation-title")).to_have_text("Mail to Sam")
    expect(phone.locator("li.msg.target")).to_contain_text("Here is a reply to Sam")
