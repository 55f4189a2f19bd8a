"""The "Wrong?" control and the Evals page in Chromium against a real server: the owner marks
the agent's reply wrong in the conversation, finds the draft case on the Evals page, keeps
it, and after a replay (`nightowl evals run`) sees its result per model and its trend."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import NIGHTOWL, ServerProcess, say, wait_for, write_script
from tests.web.conftest import ARTIFACTS, open_app, start_conversation

pytestmark = pytest.mark.slow


def test_the_owner_marks_a_reply_wrong_and_follows_the_case(
    contexts: Callable[..., BrowserContext],
    serve: Callable[..., ServerProcess],
    tmp_path: Path,
) -> None:
    model = write_script(tmp_path / "script.json", [say("Sydney is the capital.", final=True)])
    server = serve(model=model)
    conversation = start_conversation(server)
    page = open_app(contexts(viewport={"width": 360, "height": 800}), server, conversation)
    page.get_by_label("Message", exact=True).fill("What's the capital of Australia?")
    page.get_by_role("button", name="Send", exact=True).click()
    reply = page.locator("li.msg.agent").first
    expect(reply).to_contain_text("Sydney is the capital.", timeout=30_000)
    expect(page.locator("li.msg.own .wrong")).to_have_count(0)  # only the agent's messages

    reply.get_by_text("Wrong?").click()
    reply.get_by_role("button", name="Make it an eval case").click()
    expect(reply.get_by_role("status")).to_have_text("Say what should have happened first.")
    reply.get_by_label("What should have happened?").fill("Canberra is the capital.")
    reply.get_by_role("button", name="Make it an eval case").click()
    expect(reply.get_by_role("status")).to_contain_text("Saved as a draft eval case")

    page.goto(f"{server.url}/evals")
    cases = page.get_by_role("list", name="Cases")
    mine = cases.locator("li[data-status=draft]")
    expect(mine).to_have_count(1)
    expect(mine).to_contain_text("Should: Canberra is the capital.")
    expect(mine).to_contain_text("Did: Sydney is the capital.")
    expect(mine).to_contain_text("not run yet")
    expect(cases.locator("li[data-status=kept]")).to_have_count(35)  # the starter set
    case_id = mine.get_attribute("data-id")
    assert case_id

    # A bad checker is refused with the server's reason; a good one is saved.
    mine.get_by_text("Checker", exact=True).click()
    mine.get_by_label("Checker of", exact=False).fill('{"require": "x"}')
    mine.get_by_role("button", name="Save checker").click()
    expect(page.locator("#problem")).to_contain_text("unknown checker fields")
    mine.get_by_label("Checker of", exact=False).fill('{"require_text": ["canberra"]}')
    mine.get_by_role("button", name="Save checker").click()
    mine.get_by_role("button", name="Keep").click()
    kept = cases.locator(f"li[data-id='{case_id}']")
    expect(kept).to_have_attribute("data-status", "kept")

    # Two replays on the model that repeats the mistake: failing, with a trend of two.
    for _ in range(2):
        printed = subprocess.run(
            [NIGHTOWL, "evals", "run", "--case", case_id, "--model", model, "--json"],
            env=server.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(printed)["passed"] == 0
    page.reload()
    expect(kept).to_contain_text("fail")
    expect(kept).to_contain_text("trend ✗✗")
    models = page.get_by_role("list", name="Models")
    expect(models).to_contain_text("0 of 1 cases pass on their latest run")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "evals-phone.png"), full_page=True)
    with server.client() as http:
        stored = wait_for(lambda: http.get(f"/v1/evals/cases/{case_id}").json())
        assert stored["checker"]["require_text"] == ["canberra"]
