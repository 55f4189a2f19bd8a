"""A reply's timeline: from the agent's message in the app to the turn's model calls, tool runs
and safety decisions, with tokens and timings — and no message text or tool arguments."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.server import ServerProcess, wait_for
from tests.web.conftest import ARTIFACTS, start_conversation

pytestmark = pytest.mark.slow

ROUTINE = {"name": "news", "prompt": "summarise the headlines", "cron": "0 8 * * *"}


def test_a_reply_links_to_its_turns_steps_in_order(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "replies": [
                    {"tool_calls": [{"name": "load_tools", "arguments": {"query": "routine"}}]},
                    {"tool_calls": [{"name": "create_routine", "arguments": ROUTINE}]},
                    {
                        "tool_calls": [
                            {
                                "name": "send_to_user",
                                "arguments": {"text": "Set up for 8 am.", "final": True},
                            }
                        ]
                    },
                ],
                "review": {"create_routine": "ALLOW: the owner asked for a daily summary"},
            }
        )
    )
    # No memory pass: its model call, recorded on the turn after the turn is done, would add
    # a step between the API's read and the page's.
    server = serve(f"scripted:{script}", env={"NIGHTOWL_MEMORY_PASS": "off"})
    conversation = start_conversation(server)
    with server.client() as http:
        http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": "m1", "text": "every morning, the news please"},
        )
        path = f"/v1/conversations/{conversation}/messages"
        said = wait_for(
            lambda: [
                m
                for m in http.get(path).json()["messages"]
                if m["role"] == "agent" and m["body"] == "Set up for 8 am."
            ]
        )
        [reply] = said
        assert reply["turn_id"]
        timeline = http.get(
            f"/v1/conversations/{conversation}/turns/{reply['turn_id']}/timeline"
        ).json()
        other = http.get(f"/v1/conversations/{conversation}/turns/trn_none/timeline")
        assert other.status_code == 404
    steps = [(s["kind"], s["name"]) for s in timeline["steps"]]
    assert [name for kind, name in steps if kind == "tool_run"] == [
        "load_tools",
        "create_routine",
        "send_to_user",
    ]
    purposes = [s["detail"]["purpose"] for s in timeline["steps"] if s["kind"] == "model_call"]
    assert purposes.count("agent") == 3 and "safety review" in purposes
    # The review's verdict comes after its model call and before the tool runs.
    kinds = [kind for kind, _ in steps]
    review = steps.index(("safety", "create_routine"))
    assert kinds[review - 1] == "model_call"
    assert timeline["steps"][review - 1]["detail"]["purpose"] == "safety review"
    assert review < steps.index(("tool_run", "create_routine"))
    assert timeline["woken_by"][0]["source"] == "api"
    assert timeline["totals"]["agent_model_calls"] == 3 and timeline["status"] == "done"
    assert "summarise the headlines" not in json.dumps(timeline)  # no tool arguments

    page = contexts().new_page()
    page.goto(f"{server.url}/#token={server.token}")
    page.wait_for_selector("#connection[data-state=live]", state="attached")
    page.locator(f'button.conversation-item[data-id="{conversation}"]').click()
    with page.context.expect_page() as opened:
        reply_item = page.locator("li.msg.agent", has_text="Set up for 8 am.")
        reply_item.get_by_role("link", name="How was this made?").click()
    steps_page = opened.value
    rows = steps_page.locator("#steps tbody tr")
    expect(rows).to_have_count(len(steps))
    expect(steps_page.locator("#summary")).to_contain_text("Woken by api; done; 3 model calls (")
    expect(steps_page.locator("#steps")).to_contain_text("the owner asked for a daily summary")
    expect(steps_page.locator("#steps")).to_contain_text("create_routine")
    expect(steps_page.locator("#steps")).not_to_contain_text("summarise the headlines")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    steps_page.screenshot(path=str(ARTIFACTS / "timeline-desktop.png"))
