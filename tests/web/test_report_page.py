"""The Report page in Chromium against a real server: after a conversation, the owner opens
it from the app's footer and sees the totals, a bar of today's tokens from their own messages,
a row per day, and a longer span on request — on a phone-wide screen, with no CSP errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import ServerProcess, say, wait_for, write_script
from tests.web.conftest import open_app, start_conversation

pytestmark = pytest.mark.slow


def test_the_owner_reads_the_report_with_a_plot_per_day(
    contexts: Callable[..., BrowserContext],
    serve: Callable[..., ServerProcess],
    tmp_path: Path,
) -> None:
    model = write_script(tmp_path / "script.json", [say("Here you are.", final=True)])
    server = serve(model=model)
    conversation = start_conversation(server)
    page = open_app(contexts(viewport={"width": 360, "height": 800}), server, conversation)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.get_by_label("Message", exact=True).fill("What's on today?")
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.locator("li.msg.agent").first).to_contain_text("Here you are.", timeout=30_000)
    # After the reply the server may still warm or run the memory pass: wait until it rests.
    seen: list[int] = []

    def resting() -> bool:
        with server.client() as http:
            seen.append(http.get("/v1/report").json()["total"]["tokens"])
        time.sleep(1)
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    wait_for(resting, timeout=60)
    tokens = seen[-1]
    assert tokens > 0

    page.goto(f"{server.url}/")  # the list of conversations, with the app's footer
    page.locator("#report-link").click()
    expect(page).to_have_url(f"{server.url}/report")
    summary = page.get_by_role("list", name="In total")
    expect(summary.locator("li[data-label='Tokens'] strong")).to_have_text(f"{tokens:,}")
    expect(summary.locator("li[data-label='Held for you'] strong")).to_have_text("0")
    today = datetime.now(UTC).date().isoformat()
    bar = page.locator(f"#plot rect[data-day='{today}'][data-source='direct']")
    expect(bar).to_have_count(1)
    assert float(bar.get_attribute("height") or 0) > 0
    expect(page.locator("#plot rect[data-source='webhooks']")).to_have_count(0)
    rows = page.get_by_role("table", name="Per day").locator("tbody tr")
    expect(rows).to_have_count(7)
    expect(rows.first).to_have_attribute("data-day", today)  # newest first
    expect(rows.first).to_contain_text(f"{tokens:,}")

    page.get_by_label("Days", exact=True).select_option("30")
    expect(rows).to_have_count(30)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert problems == []
