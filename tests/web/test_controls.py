"""What the agent sends, rendered in the browser: questions, drafts, files, and nothing unsafe."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, expect

from nightowl.safety.wording import PREVIEW_CHARS, arguments_json
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script
from tests.web.conftest import ARTIFACTS, open_app, start_conversation

pytestmark = pytest.mark.slow

APPROVAL = say(
    "May I book the **9:00** train to Leeds (£42)?",
    buttons=[{"label": "Approve", "value": "yes"}, {"label": "Deny", "value": "no"}],
    ask="approval",
)


def _send(server: ServerProcess, conversation: str, text: str, client_id: str) -> None:
    with server.client() as http:
        sent = http.post(
            f"/v1/conversations/{conversation}/messages",
            json={"client_id": client_id, "text": text},
        )
        assert sent.status_code == 201, sent.text


def test_an_approval_clicked_in_the_page_resumes_the_waiting_turn_once(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [APPROVAL, say("Booked: 9:00 to Leeds.", final=True)],
    )
    server = serve(model)
    conversation = start_conversation(server)
    laptop = open_app(contexts(), server, conversation)
    phone = open_app(contexts(viewport={"width": 390, "height": 844}), server, conversation)
    _send(server, conversation, "book me a train to Leeds tomorrow morning", "ask")

    for page in (laptop, phone):
        expect(page.locator("#activity")).to_have_text("nightowl is waiting for your approval…")
        expect(page.get_by_role("button", name="Approve")).to_be_enabled()
    laptop.get_by_role("button", name="Approve").click()

    for page in (laptop, phone):
        expect(page.locator("li.msg.agent", has_text="Booked")).to_have_count(1)
        expect(page.get_by_role("button", name="Approve")).to_be_disabled()
        expect(page.locator(".control-status")).to_have_text("Answered: Approve")
        expect(page.locator("#activity")).to_be_hidden()
    expect(phone.locator("li.msg.own", has_text="Approve")).to_have_count(1)

    with server.client() as http:
        messages = http.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
        question = next(m for m in messages if m["controls"])
        assert question["controls"]["state"] == "answered"
        again = http.post(
            f"/v1/conversations/{conversation}/messages/{question['id']}/answer",
            json={"client_id": "second-device", "value": "no"},
        )
    assert again.status_code == 409
    assert "already answered" in again.json()["error"]["message"]
    url = f"sqlite:///{server.data_dir / 'nightowl.db'}"
    wait_for(lambda: rows(url, "SELECT status FROM turns") == [("done",)])
    results = [
        payload
        for (payload,) in rows(url, "SELECT payload FROM transcript_entries ORDER BY id")
        if '"tool_result"' in payload
    ]
    assert any("The user clicked 'Approve' (value: 'yes')" in r for r in results)


def test_a_draft_edited_in_the_page_goes_back_to_the_agent_as_edited(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            say("Here is a reply to Sam:", draft="Hi Sam, Tuesday works for me."),
            say("Sent to Sam.", final=True),
        ],
    )
    server = serve(model)
    conversation = start_conversation(server)
    page = open_app(contexts(), server, conversation)
    _send(server, conversation, "answer Sam about the meeting", "ask")

    expect(page.locator("#activity")).to_have_text("nightowl is waiting for you to review a draft…")
    draft = page.get_by_role("textbox", name="Draft")
    expect(draft).to_have_value("Hi Sam, Tuesday works for me.")
    draft.fill("Hi Sam, Wednesday works better.")
    page.get_by_role("button", name="Send", exact=True).nth(0).click()

    expect(page.locator("li.msg.agent", has_text="Sent to Sam.")).to_have_count(1)
    expect(page.locator(".control-status")).to_have_text("Sent.")
    url = f"sqlite:///{server.data_dir / 'nightowl.db'}"
    results = [p for (p,) in rows(url, "SELECT payload FROM transcript_entries ORDER BY id")]
    assert any("Hi Sam, Wednesday works better." in r and "tool_result" in r for r in results)


PAYLOAD = (
    "<script>window.__pwned = 'script'</script> "
    "<img src=x onerror=\"window.__pwned = 'img'\"> "
    "<svg onload=\"window.__pwned = 'svg'\"></svg>"
)


def test_script_and_onerror_payloads_render_as_text(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [say(f"**Echo:** {PAYLOAD} [click me](javascript:window.__pwned='link')", final=True)],
    )
    server = serve(model)
    conversation = start_conversation(server)
    page = open_app(contexts(), server, conversation)
    page.get_by_role("textbox", name="Message").fill(PAYLOAD)
    page.get_by_role("textbox", name="Message").press("Enter")

    agent = page.locator("li.msg.agent")
    expect(agent).to_contain_text("<script>window.__pwned = 'script'</script>")
    expect(page.locator("li.msg.own")).to_contain_text("<img src=x onerror=")
    messages = page.locator("#messages")
    assert messages.locator("script, img, svg, iframe").count() == 0
    # The javascript: link stays text (the only links are each reply's own "How was this made?").
    assert messages.locator("a:not(.how)").count() == 0
    agent.get_by_text("click me").click()
    assert page.evaluate("window.__pwned") is None


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows_ = b"".join(
        b"\x00" + b"".join(bytes((40 + x % 200, 80 + y % 150, 180)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows_))
        + chunk(b"IEND", b"")
    )


SUMMARY = """## Monday, in short
- **3 meetings** moved to the afternoon, as you prefer
- the `deploy` of *billing* finished green
- one email needs you: [the invoice thread](https://example.com/inbox)

```
make test  # 112 passed
```"""


def test_files_show_inline_and_download_and_the_view_is_captured_at_two_widths(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    model = write_script(
        tmp_path / "script.json",
        [
            say(SUMMARY, files=["reports/chart.png", "reports/notes.txt"]),
            APPROVAL,
        ],
    )
    server = serve(model)
    with server.client() as http:
        owner = http.get("/v1/me").json()["id"]
    reports = server.data_dir / "homes" / owner / "reports"
    reports.mkdir(parents=True)
    (reports / "chart.png").write_bytes(_png(240, 120))
    (reports / "notes.txt").write_text("Notes for Monday\n")
    conversation = start_conversation(server)
    _send(server, conversation, "What happened today? Anything I need to do?", "ask")

    shots = ARTIFACTS / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    for name, viewport, scheme in (
        ("conversation-phone", {"width": 390, "height": 844}, "light"),
        ("conversation-desktop", {"width": 1280, "height": 800}, "light"),
        ("conversation-desktop-dark", {"width": 1280, "height": 800}, "dark"),
    ):
        page = open_app(contexts(viewport=viewport, color_scheme=scheme), server, conversation)
        image = page.locator("li.msg.agent img[alt='chart.png']")
        expect(image).to_be_visible()
        page.wait_for_function(
            "() => document.querySelector(\"img[alt='chart.png']\").naturalWidth === 240"
        )
        expect(page.get_by_role("button", name="Approve")).to_be_visible()
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        assert (shots / f"{name}.png").stat().st_size > 10_000

    with page.expect_download() as download:
        page.get_by_role("button", name="Download notes.txt (17 B)").click()
    saved = tmp_path / "notes.txt"
    download.value.save_as(saved)
    assert saved.read_text() == "Notes for Monday\n"
    assert download.value.suggested_filename == "notes.txt"


def test_unread_markers_follow_the_owner_across_devices(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    server = serve(write_script(tmp_path / "script.json", [say("Done.", final=True)]))
    here = start_conversation(server)
    elsewhere = start_conversation(server)
    page = open_app(contexts(), server, here)
    _send(server, elsewhere, "tidy my downloads folder", "tidy")

    item = page.locator(f".conversation-item[data-id='{elsewhere}']")
    expect(item.locator(".unread")).to_have_text("1")
    item.click()
    expect(page.locator("li.msg.agent")).to_contain_text("Done.")
    expect(item.locator(".unread")).to_have_count(0)

    other = open_app(contexts(), server, here)
    expect(other.locator(f".conversation-item[data-id='{elsewhere}']")).to_be_visible()
    expect(other.locator(f".conversation-item[data-id='{elsewhere}'] .unread")).to_have_count(0)


def test_an_approval_shows_every_argument_escaped_and_the_whole_action_behind_show_all(
    tmp_path: Path,
    serve: Callable[..., ServerProcess],
    contexts: Callable[..., BrowserContext],
) -> None:
    command = (
        "echo `id` ``` done\n**Approved by the owner**\u2028Owner: yes \u202eexe.txt "
        "[click](https://evil.example) " + "x" * 900 + " THE-END"
    )
    arguments = {"command": command}
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            {
                "replies": [{"tool_calls": [{"name": "shell", "arguments": arguments}]}],
                "review": {"*": "BLOCK: **ALLOW** it, [the owner said so](https://evil.example)"},
            }
        )
    )
    server = serve(f"scripted:{script}", env={"NIGHTOWL_APPROVAL_TIMEOUT_S": "60"})
    conversation = start_conversation(server)
    page = open_app(contexts(), server, conversation)
    _send(server, conversation, "clean up my downloads", "ask")

    held = page.locator("li.msg.agent", has_text="Approve this action?")
    expect(held).to_have_count(1)
    body = held.locator(".body")
    # The arguments sit in one code span, escaped (still the same JSON), with their length.
    shown = arguments_json(arguments)
    expect(body.locator("code").nth(1)).to_have_text(shown[:PREVIEW_CHARS] + "…")
    expect(body).to_contain_text(f"the first {PREVIEW_CHARS} of {len(shown):,} characters")
    # Nothing in an argument or the reviewer's reason formats text, links or starts a line.
    expect(body.locator("strong")).to_have_text(["Approve this action?"])
    expect(body.locator("a")).to_have_count(0)
    expect(body.locator("br")).to_have_count(1)  # "Held because" / "Without an answer"
    assert "\u202e" not in body.inner_text() and "\u2028" not in body.inner_text()

    show = held.get_by_role("button", name=f"Show all {len(shown):,} characters")
    expect(show).to_have_attribute("aria-expanded", "false")
    show.click()
    full = held.locator("pre.action-arguments")
    expect(full).to_be_visible()
    assert json.loads(full.text_content() or "") == arguments  # exactly what would run
    expect(held.get_by_role("button", name="Show less")).to_have_attribute("aria-expanded", "true")
    page.screenshot(path=str(ARTIFACTS / "approval-show-all.png"), full_page=True)
