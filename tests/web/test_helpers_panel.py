"""The conversation shows its helpers live (status, last step, cost) with a Stop button."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import ServerProcess, say
from tests.web.conftest import ARTIFACTS, open_app, start_conversation

pytestmark = pytest.mark.slow


def test_a_working_helper_is_listed_live_and_stopped_from_the_page(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    task = "Read every report in ~/reports and list the dates that disagree."
    script = {
        "replies": [
            {
                "tool_calls": [
                    {"name": "start_helper", "arguments": {"task": task, "name": "reader"}},
                    {"name": "send_to_user", "arguments": {"text": "On it.", "final": True}},
                ]
            },
            say("Stopped, as you asked.", final=True),
        ],
        "helper": [
            {"tool_calls": [{"name": "wait", "arguments": {"seconds": 1 + n / 100}}]}
            for n in range(60)
        ],
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    server = serve(f"scripted:{tmp_path / 'script.json'}")
    conversation = start_conversation(server)
    page = open_app(contexts(viewport={"width": 390, "height": 844}), server, conversation)
    page.get_by_role("textbox", name="Message").fill("Check my reports.")
    page.get_by_role("textbox", name="Message").press("Enter")

    helpers = page.get_by_role("list", name="Helpers working for this conversation")
    helper = helpers.locator("li.helper")
    expect(helper).to_have_count(1)
    expect(helper).to_contain_text("reader")
    expect(helper).to_contain_text(task[:40])
    expect(helper).to_have_attribute("data-status", "running")
    expect(helper).to_contain_text("waiting")  # its current step, live
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "helpers-phone.png"))
    page.get_by_role("button", name="Stop the helper reader").click()
    expect(helper).to_have_attribute("data-status", "stopped")
    expect(helper.get_by_role("button")).to_have_count(0)
    expect(page.locator("li.msg.agent").last).to_contain_text("Stopped, as you asked.")
