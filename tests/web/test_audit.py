"""The audit log page: what the safety gate reviewed, held and decided, in the browser."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import ServerProcess, wait_for
from tests.web.conftest import ARTIFACTS, start_conversation

pytestmark = pytest.mark.slow


def test_the_audit_page_lists_reviews_holds_and_timeouts(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    script = tmp_path / "script.json"
    routine = {"name": "news", "prompt": "summarise the news", "cron": "0 8 * * *"}
    script.write_text(
        json.dumps(
            {
                "replies": [{"tool_calls": [{"name": "create_routine", "arguments": routine}]}],
                "review": {"create_routine": "BLOCK: the owner did not ask for a schedule"},
            }
        )
    )
    server = serve(f"scripted:{script}", env={"NIGHTOWL_APPROVAL_TIMEOUT_S": "1"})
    conversation = start_conversation(server)
    with server.client() as http:
        http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "keep me posted on the news"},
        )
        wait_for(lambda: "timed_out" in http.get("/v1/audit").text)

    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]")
    page.get_by_role("link", name="Audit log").click()
    rows = page.locator("#audit-table tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("timed out")
    expect(rows.nth(2)).to_contain_text("reviewed")
    expect(rows.nth(2)).to_contain_text("the owner did not ask for a schedule")
    expect(rows.nth(1)).to_contain_text("create_routine (write)")
    expect(page.locator("#conversation")).to_be_hidden()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "audit-desktop.png"))
    page.get_by_role("link", name="Back to conversations").click()
    expect(page.locator("#audit")).to_be_hidden()
