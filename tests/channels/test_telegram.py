"""The Telegram channel end to end: the real server process with a scripted model, and a
stand-in of the Bot API (telegram_api.py: its published JSON shapes, errors and MarkdownV2
parse check) started here on 127.0.0.1, on SQLite and PostgreSQL. The real api.telegram.org
cannot be reached from the test machine."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nightowl.channels.base import ChannelConfig, ChannelError
from nightowl.channels.relay import MAYBE_REPEAT
from nightowl.channels.telegram import TelegramChannel
from nightowl.channels.telegram_markdown import messages as markdown_v2
from tests.channels.telegram_api import parse_markdown_v2
from tests.channels.telegram_standin import OWNER_ID, STRANGER_ID, TelegramStandIn
from tests.e2e.store_view import rows
from tests.safety.helpers import wait_kinds
from tests.server import ServerProcess, say, wait_for

pytestmark = pytest.mark.slow

TOKEN = "7000001:AAH-test-token"
SPECIAL = "_*[]()~`>#+-=|{}.!\\"
IN_CODE = SPECIAL.replace("`", "")  # a backtick ends a markdown code span
IN_LABEL = SPECIAL.replace("[", "").replace("]", "")  # and a bracket a link's label


@pytest.fixture
def telegram(tmp_path: Path) -> Iterator[TelegramStandIn]:
    api = TelegramStandIn(tmp_path / "telegram", TOKEN).start()
    try:
        yield api
    finally:
        api.stop()


def _start(
    tmp_path: Path,
    database_url: str,
    replies: list[dict[str, Any]],
    review: dict[str, str] | None = None,
    **env: str,
) -> ServerProcess:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"replies": replies, "then": "silent", "review": review or {}}))
    return ServerProcess(
        tmp_path / "data",
        database_url,
        model=f"scripted:{script}",
        env={
            "NIGHTOWL_CHANNEL_RELOAD_S": "0.2",
            "NIGHTOWL_CHANNEL_RETRY_MAX_S": "1",
            **env,
        },
    ).start()


def _add_channel(client: httpx.Client, api: TelegramStandIn, **settings: Any) -> dict[str, Any]:
    assert client.put("/v1/secrets/TG_TOKEN", json={"value": TOKEN}).status_code == 204
    made = client.post(
        "/v1/channels",
        json={
            "name": "telegram",
            "kind": "telegram",
            "settings": {
                "api_url": api.url,
                "owner": str(OWNER_ID),
                "bot_token_secret": "TG_TOKEN",
                "poll_timeout_s": 1,
                **settings,
            },
        },
    )
    assert made.status_code == 201, made.text
    return dict(wait_for(lambda: _ready(client), timeout=30))


def _ready(client: httpx.Client) -> dict[str, Any] | None:
    [channel] = client.get("/v1/channels").json()
    assert channel["status"] != "failed", channel["error"]
    return channel if channel["status"] == "ok" else None


def _conversation(client: httpx.Client) -> dict[str, Any]:
    [conversation] = [
        c for c in client.get("/v1/conversations").json() if c["channel"] == "telegram"
    ]
    return dict(conversation)


def _said(client: httpx.Client, conversation: str) -> list[tuple[str, str, str]]:
    page = client.get(f"/v1/conversations/{conversation}/messages").json()
    return [(m["role"], m["body"], m["trust"]) for m in page["messages"]]


def test_markdown_v2_escapes_every_special_character_and_splits_long_messages() -> None:
    markdown = (
        f"# Heading {SPECIAL}\n"
        f"Plain {SPECIAL} text; 1.5 + 2 = 3.5!\n"
        f"**bold (a.b) #1!** and *italic [x]* and `code {IN_CODE}`\n"
        f"[a link (see) {IN_LABEL}](https://example.com/a_(b)?q=1&r=2)\n"
        f"- item {SPECIAL}\n"
        f"2. second {SPECIAL}\n"
        f"> quoted {SPECIAL}\n"
        f"```python\nprint('{SPECIAL}')\n```\n"
        "end."
    )
    [message] = markdown_v2(markdown)
    plain, entities = parse_markdown_v2(message)
    assert plain.splitlines() == [
        f"Heading {SPECIAL}",
        f"Plain {SPECIAL} text; 1.5 + 2 = 3.5!",
        f"bold (a.b) #1! and italic [x] and code {IN_CODE}",
        f"a link (see) {IN_LABEL}",
        f"• item {SPECIAL}",
        f"2. second {SPECIAL}",
        f"quoted {SPECIAL}",
        f"print('{SPECIAL}')",
        "",
        "end.",
    ]
    kinds = {(e["type"], plain[e["offset"] : e["offset"] + e["length"]]) for e in entities}
    assert ("bold", "bold (a.b) #1!") in kinds and ("italic", "italic [x]") in kinds
    assert ("code", f"code {IN_CODE}") in kinds
    assert ("text_link", f"a link (see) {IN_LABEL}") in kinds
    link = next(e for e in entities if e["type"] == "text_link")
    assert link["url"] == "https://example.com/a_(b)?q=1&r=2"
    # The check can fail: one unescaped character and the API refuses the whole message.
    with pytest.raises(ValueError, match=r"Character '\.' is reserved"):
        parse_markdown_v2("Done.")
    # 4096 characters at most, nothing lost, every piece parses.
    long = "\n".join(f"Line {n}: a.b (c) {SPECIAL}" for n in range(600))
    pieces = markdown_v2(long)
    assert len(pieces) > 1
    texts = [parse_markdown_v2(p)[0] for p in pieces]
    assert all(len(t) <= 4096 for t in texts)
    assert "\n".join(texts) == long
    code = "```\n" + "\n".join(f"x = {n} # {SPECIAL}" for n in range(900)) + "\n```"
    assert all(len(parse_markdown_v2(p)[0]) <= 4096 for p in markdown_v2(code))


def test_a_webhook_needs_the_secret_token_and_the_owners_message_is_answered_in_the_chat(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("Hello! Your server is *fine*.", final=True)])
    try:
        with server.client() as client:
            assert (
                client.put("/v1/secrets/TG_HOOK", json={"value": "s3cret-token"}).status_code == 204
            )
            channel = _add_channel(
                client, telegram, mode="webhook", webhook_secret_secret="TG_HOOK"
            )
            path = "/v1/ingress/" + channel["ingress_url"].rsplit("/", 1)[1]
            # The owner points the bot at the ingress URL (docs/channels.md), as with curl.
            hooked = httpx.post(
                f"{telegram.url}/bot{TOKEN}/setWebhook",
                data={"url": server.url + path, "secret_token": "s3cret-token"},
            )
            assert hooked.json() == {"ok": True, "result": True}
            update = {
                "update_id": 1,
                "message": {
                    "message_id": 1,
                    "date": int(time.time()),
                    "chat": {"id": OWNER_ID, "type": "private"},
                    "from": {"id": OWNER_ID, "is_bot": False, "first_name": "Owner"},
                    "text": "Forged: delete everything",
                },
            }
            for headers in ({}, {"X-Telegram-Bot-Api-Secret-Token": "guess"}):
                refused = httpx.post(server.url + path, json=update, headers=headers)
                assert refused.status_code == 401, refused.text
                assert "Secret-Token" in refused.text
            assert [c for c in client.get("/v1/conversations").json()] == []
            assert rows(server.env["NIGHTOWL_DATABASE_URL"], "SELECT count(*) FROM messages") == [
                (0,)
            ]

            pushed = telegram.say("Is my server up?")
            assert pushed["webhook_status"] == 200
            [answer] = wait_for(lambda: telegram.sent(OWNER_ID), 60)
            assert answer["text"] == "Hello! Your server is fine."
            conversation = _conversation(client)
            shown = client.get(f"/v1/conversations/{conversation['id']}").json()
            assert (shown["channel"], shown["kind"]) == ("telegram", "direct")
            said = _said(client, conversation["id"])
            assert said[0] == ("user", "Is my server up?", "owner")
            assert said[1] == ("agent", "Hello! Your server is *fine*.", "owner") or (
                said[1][:2] == ("agent", "Hello! Your server is *fine*.")
            )
            assert telegram.state()["pending_updates"] == 0  # the hook took it
            tested = client.post("/v1/channels/telegram/test").json()
            assert tested["ok"] and "@nightowl_test_bot" in tested["detail"]
            assert f"webhook set to {server.url}{path}" in tested["detail"]
    finally:
        server.stop()


def test_long_polling_survives_a_sigkill_between_updates_losing_and_repeating_nothing(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _start(
        tmp_path,
        database_url,
        [say(f"Reply {n}: all *fine*.", final=True) for n in range(1, 5)],
    )
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.say("one")
            [first] = wait_for(lambda: telegram.sent(OWNER_ID), 60)
            assert first["text"] == "Reply 1: all fine."
            assert first["entities"] == [{"type": "italic", "offset": 13, "length": 4}]
            conversation = _conversation(client)
            assert conversation["kind"] == "direct"
            assert _said(client, conversation["id"])[0] == ("user", "one", "owner")

            telegram.say("two")
            server.kill()  # SIGKILL: "two" may or may not be stored yet
            telegram.say("three")  # while the server is down
            server.start()
            path = f"/v1/conversations/{conversation['id']}/messages"

            def users() -> list[str]:
                page = client.get(path).json()["messages"]
                return [m["body"] for m in page if m["role"] == "user"]

            wait_for(lambda: users() == ["one", "two", "three"], 60)
            wait_for(lambda: telegram.state()["pending_updates"] == 0, 30)
            calls = telegram.state()["get_updates_calls"]
            wait_for(lambda: telegram.state()["get_updates_calls"] >= calls + 2, 30)
            assert users() == ["one", "two", "three"]  # each once
            [(offset,)] = rows(server.env["NIGHTOWL_DATABASE_URL"], "SELECT position FROM channels")
            position = json.loads(offset) if isinstance(offset, str) else offset
            assert position["offset"] == 103  # the three updates (100-102) are confirmed

            def agent_messages() -> list[str]:
                page = client.get(path).json()["messages"]
                return [m["body"] for m in page if m["role"] == "agent"]

            wait_for(lambda: len(telegram.sent(OWNER_ID)) == len(agent_messages()) >= 2, 60)
            bot = [m["text"] for m in telegram.sent(OWNER_ID)]
            assert bot == [b.replace("*", "") for b in agent_messages()]
            assert telegram.state()["refused"] == []
    finally:
        server.stop()


def _approval_server(tmp_path: Path, database_url: str, window_s: int) -> ServerProcess:
    routine = {"name": "news", "prompt": "summarise the news", "cron": "0 8 * * *"}
    return _start(
        tmp_path,
        database_url,
        [
            {"tool_calls": [{"name": "create_routine", "arguments": routine}]},
            say("Done: the news at 8.", final=True),
        ],
        review={"create_routine": "BLOCK: the owner did not ask for a schedule"},
        NIGHTOWL_APPROVAL_TIMEOUT_S=str(window_s),
    )


def _question(telegram: TelegramStandIn) -> dict[str, Any]:
    def asked() -> dict[str, Any] | None:
        return next((m for m in telegram.sent(OWNER_ID) if m.get("reply_markup")), None)

    question: dict[str, Any] = wait_for(asked, 60)
    keyboard = question["reply_markup"]["inline_keyboard"]
    assert [[b["text"] for b in row] for row in keyboard] == [["Approve"], ["Deny"]]
    return question


def test_an_approval_is_answered_from_the_inline_keyboard_by_the_owner_only_once(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _approval_server(tmp_path, database_url, window_s=120)
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.say("Please book the usual table.")
            question = _question(telegram)
            conversation = _conversation(client)["id"]
            assert "did not ask for a schedule" in question["text"]
            # Someone else in the chat presses Approve: it does not count.
            telegram.press(question, "v:approve", user_id=STRANGER_ID)
            wait_for(lambda: len(telegram.state()["callback_answers"]) == 1, 30)
            assert client.get("/v1/routines").json() == []
            assert "approved" not in {e["kind"] for e in wait_kinds(client, conversation)}
            telegram.press(question, "v:yes-please")  # a value the question does not offer
            wait_for(lambda: len(telegram.state()["callback_answers"]) == 2, 30)
            telegram.press(question, "v:approve")  # the owner
            telegram.press(question, "v:approve")  # pressed twice: one answer
            wait_kinds(client, conversation, "approved")
            routines = wait_for(lambda: client.get("/v1/routines").json())
            assert [r["name"] for r in routines] == ["news"]
            wait_for(lambda: len(telegram.state()["callback_answers"]) == 4, 30)
            wait_for(lambda: any("news at 8" in m["text"] for m in telegram.sent(OWNER_ID)), 60)
            kinds = [e["kind"] for e in wait_kinds(client, conversation, "approved")]
            assert kinds.count("approved") == 1
            assert len(client.get("/v1/routines").json()) == 1
            # The same conversation in the web app's API, with the owner's answer.
            shown = client.get(f"/v1/conversations/{conversation}").json()
            assert shown["channel"] == "telegram" and shown["kind"] == "direct"
            said = _said(client, conversation)
            assert said[0] == ("user", "Please book the usual table.", "owner")
            assert ("user", "Approve", "owner") in said
    finally:
        server.stop()


def test_a_press_after_the_approval_window_runs_nothing(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _approval_server(tmp_path, database_url, window_s=2)
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.say("Please book the usual table.")
            question = _question(telegram)
            conversation = _conversation(client)["id"]
            wait_kinds(client, conversation, "timed_out")
            telegram.press(question, "v:approve")
            wait_for(lambda: len(telegram.state()["callback_answers"]) == 1, 30)
            wait_for(
                lambda: (
                    telegram.state()["pending_updates"] == 0
                    and rows(
                        server.env["NIGHTOWL_DATABASE_URL"],
                        "SELECT count(*) FROM turns WHERE status != 'done'",
                    )
                    == [(0,)]
                ),
                30,
            )
            assert client.get("/v1/routines").json() == []
            assert "approved" not in {e["kind"] for e in wait_kinds(client, conversation)}
            assert ("user", "Approve", "owner") not in _said(client, conversation)
    finally:
        server.stop()


def test_markdown_files_and_rate_limits_through_the_bot_api(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    text = (
        f"**Report**: 1.5 + 2 = 3.5! (see [the page](https://example.com/a_(b))) {SPECIAL}\n"
        f"- `x = {IN_CODE}`\n"
        f"```\nraw {SPECIAL}\n```"
    )
    server = _start(
        tmp_path,
        database_url,
        [
            say(text, files=["report.txt"], final=True),
            say("Got your notes.", final=True),
        ],
    )
    try:
        with server.client() as client:
            me = client.get("/v1/me").json()["id"]
            home = tmp_path / "data" / "homes" / me
            home.mkdir(parents=True, exist_ok=True)
            (home / "report.txt").write_text("All systems go.")
            _add_channel(client, telegram)
            telegram.rate_limit("sendMessage", 2)  # the first answer is 429, retry_after 2
            telegram.say("Send me the report.")
            sent = wait_for(
                lambda: len(telegram.sent(OWNER_ID)) >= 2 and telegram.sent(OWNER_ID), 60
            )
            document, report = sent[0], sent[1]
            assert document["document"]["file_name"] == "report.txt"
            files = telegram.state()["files"]
            assert files[document["document"]["file_id"]][2] == "All systems go."
            assert report["text"].startswith(f"Report: 1.5 + 2 = 3.5! (see the page) {SPECIAL}\n")
            assert f"raw {SPECIAL}" in report["text"]
            types = {e["type"] for e in report["entities"]}
            assert {"bold", "text_link", "code", "pre"} <= types
            assert telegram.state()["refused"] == []
            conversation = _conversation(client)["id"]
            deliveries = rows(
                server.env["NIGHTOWL_DATABASE_URL"],
                "SELECT attempts, state, error FROM channel_deliveries",
            )
            assert deliveries == [(2, "sent", "")]  # the 429, then sent
            # The retry sent only what the 429 held back: the document went once.
            assert len([m for m in telegram.sent(OWNER_ID) if "document" in m]) == 1

            file_id = telegram.upload("notes.txt", "text/plain", b"Remember the cake.")
            telegram.say(
                "",
                document={
                    "file_id": file_id,
                    "file_unique_id": "u" + file_id,
                    "file_name": "notes.txt",
                    "mime_type": "text/plain",
                    "file_size": 18,
                },
                caption="my notes",
            )
            wait_for(lambda: len(telegram.sent(OWNER_ID)) >= 3, 60)
            received = [b for r, b, _ in _said(client, conversation) if r == "user"][-1]
            assert received.startswith("my notes") and "~/inbox/" in received
            [saved] = list((home / "inbox").iterdir())
            assert saved.name.endswith("notes.txt")
            assert saved.read_bytes() == b"Remember the cake."
    finally:
        server.stop()


def test_alerts_bring_an_approval_of_a_web_conversation_to_telegram_and_take_the_answer(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _approval_server(tmp_path, database_url, window_s=120)
    try:
        with server.client() as client:
            _add_channel(client, telegram, alerts=True)
            conversation = client.post("/v1/conversations", json={}).json()["id"]
            client.post(
                f"/v1/conversations/{conversation}/messages",
                json={"client_id": "m1", "text": "keep me up to date on the news"},
            )
            question = _question(telegram)
            assert "did not ask for a schedule" in question["text"]
            telegram.press(question, "v:approve")
            kinds = [e["kind"] for e in wait_kinds(client, conversation, "approved")]
            assert kinds.count("approved") == 1
            routines = wait_for(lambda: client.get("/v1/routines").json())
            assert [r["name"] for r in routines] == ["news"]
            # The answer went to the web conversation; its ordinary messages stay there.
            wait_for(
                lambda: any(b == "Done: the news at 8." for _, b, _ in _said(client, conversation)),
                60,
            )
            said = _said(client, conversation)
            assert ("user", "Approve", "owner") in said
            url = server.env["NIGHTOWL_DATABASE_URL"]
            wait_for(
                lambda: (
                    rows(
                        url,
                        "SELECT b.planned_seq >= c.last_seq FROM channel_bindings b "
                        "JOIN conversations c ON c.id = b.conversation_id",
                    )
                    in ([(True,)], [(1,)])
                ),
                30,
            )
            assert rows(url, "SELECT alerts_only FROM channel_bindings") in ([(True,)], [(1,)])
            # Only what asks the owner something: the approval, and the routine's own question
            # (it stays off until approved); not the agent's "Done".
            sent = telegram.sent(OWNER_ID)
            assert sent[0]["text"] == question["text"] and len(sent) == 2
            assert "routine news" in sent[1]["text"] and sent[1]["reply_markup"]
            assert [c["id"] for c in client.get("/v1/conversations").json()] == [conversation]
    finally:
        server.stop()


def test_settings_are_checked_when_the_channel_is_built() -> None:
    def build(**settings: Any) -> TelegramChannel:
        secrets = {"TG": TOKEN, "HOOK": "h"}
        return TelegramChannel(ChannelConfig("chn_1", "telegram", "usr_1", settings, secrets))

    with pytest.raises(ChannelError, match="numeric Telegram user id") as error:
        build(owner="@me", bot_token_secret="TG")
    assert error.value.permanent
    with pytest.raises(ChannelError, match="set bot_token_secret"):
        build(owner="42")
    with pytest.raises(ChannelError, match="no secret named 'NOPE'"):
        build(owner="42", bot_token_secret="NOPE")
    with pytest.raises(ChannelError, match="set mode to polling or webhook"):
        build(owner="42", bot_token_secret="TG", mode="push")
    with pytest.raises(ChannelError, match="set webhook_secret_secret"):
        build(owner="42", bot_token_secret="TG", mode="webhook")
    with pytest.raises(ChannelError, match="set alerts to true or false"):
        build(owner="42", bot_token_secret="TG", alerts="yes")
    with pytest.raises(ChannelError, match="poll_timeout_s"):
        build(owner="42", bot_token_secret="TG", poll_timeout_s="soon")
    assert build(owner="42", bot_token_secret="TG").owner == "42"


def test_in_a_group_the_agent_answers_only_when_mentioned_or_replied_to(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _start(
        tmp_path,
        database_url,
        [say("The meeting is at 10.", final=True), say("You're welcome.", final=True)],
    )
    group = {"id": -100777, "type": "supergroup", "title": "Team"}
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.say("coffee anyone?", user_id=STRANGER_ID, chat=group)
            telegram.say(
                "when is the meeting, @nightowl_test_bot?", user_id=STRANGER_ID, chat=group
            )
            [answer] = wait_for(lambda: telegram.sent(-100777), 60)
            assert answer["text"] == "The meeting is at 10."
            conversation = _conversation(client)
            assert conversation["kind"] == "group"
            said = _said(client, conversation["id"])
            assert [t for r, _, t in said if r == "user"] == ["untrusted"]
            assert "when is the meeting" in said[0][1] and str(STRANGER_ID) in said[0][1]
            assert not any("coffee" in b for _, b, _ in said)
            reply = {"message_id": answer["message_id"], "date": answer["date"]}
            telegram.say(
                "thanks",
                user_id=STRANGER_ID,
                chat=group,
                reply_to_message={**reply, "chat": group, "from": answer["from"], "text": "x"},
            )
            wait_for(lambda: len(telegram.sent(-100777)) == 2, 60)
            assert telegram.sent(OWNER_ID) == []
    finally:
        server.stop()


def test_a_sigkill_between_the_send_and_its_record_sends_again_saying_so(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _start(
        tmp_path,
        database_url,
        [say("Backup finished.", final=True)],
        NIGHTOWL_CHANNEL_DELIVERY_LEASE_S="2",
    )
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.hold(True)
            telegram.say("Did the backup run?")
            wait_for(lambda: telegram.sent(OWNER_ID), 60)  # Telegram has it; nightowl not yet
            server.kill()
            telegram.hold(False)
            server.start()
            wait_for(lambda: len(telegram.sent(OWNER_ID)) == 2, 60)
            first, again = (m["text"] for m in telegram.sent(OWNER_ID))
            assert first == "Backup finished."
            assert again == MAYBE_REPEAT + "Backup finished."
            url = server.env["NIGHTOWL_DATABASE_URL"]
            wait_for(
                lambda: (
                    rows(url, "SELECT state, attempts FROM channel_deliveries") == [("sent", 2)]
                ),
                30,
            )
    finally:
        server.stop()


def test_a_draft_is_sent_from_its_inline_keyboard_and_a_set_webhook_url_is_registered(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _start(
        tmp_path,
        database_url,
        [
            say("Here is a reply to Sam:", draft="Hi Sam, Tuesday works for me."),
            say("Sent to Sam.", final=True),
        ],
    )
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.say("answer Sam about the meeting")
            [draft] = wait_for(lambda: telegram.sent(OWNER_ID), 60)
            assert "Hi Sam, Tuesday works for me." in draft["text"]
            keyboard = draft["reply_markup"]["inline_keyboard"]
            assert [(b["text"], b["callback_data"]) for b in keyboard[0]] == [
                ("Send", "send"),
                ("Discard", "discard"),
            ]
            telegram.press(draft, "send")
            wait_for(lambda: len(telegram.sent(OWNER_ID)) == 2, 60)
            assert telegram.sent(OWNER_ID)[1]["text"] == "Sent to Sam."
            url = server.env["NIGHTOWL_DATABASE_URL"]
            results = [p for (p,) in rows(url, "SELECT payload FROM transcript_entries")]
            assert any(
                "Hi Sam, Tuesday works for me." in str(r) and "send" in str(r) for r in results
            )

            # A webhook channel with webhook_url set registers it (with its secret) itself.
            assert client.delete("/v1/channels/telegram").status_code == 204
            assert client.put("/v1/secrets/TG_HOOK", json={"value": "h00k"}).status_code == 204
            _add_channel(
                client,
                telegram,
                mode="webhook",
                webhook_secret_secret="TG_HOOK",
                webhook_url="https://nightowl.example/v1/ingress/chn_x",
            )
            hook = {"url": "https://nightowl.example/v1/ingress/chn_x", "secret": "h00k"}
            wait_for(lambda: telegram.state()["webhook"] == hook, 30)
    finally:
        server.stop()


def _marked(client: httpx.Client) -> list[dict[str, Any]]:
    """The owner's eval cases made by marking a reply wrong (the shipped set left out)."""
    return [c for c in client.get("/v1/evals/cases").json()["cases"] if c["source"] == "marked"]


def _logged(server: ServerProcess, text: str) -> int:
    return sum(text in line.get("message", "") for line in server.log_lines())


def test_the_owners_thumbs_down_reaction_marks_the_reply_wrong_once(
    tmp_path: Path, database_url: str, telegram: TelegramStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("It opens at nine.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, telegram)
            telegram.say("When does the museum open?")
            [reply] = wait_for(lambda: telegram.sent(OWNER_ID), 60)
            conversation = _conversation(client)["id"]
            [agent] = [
                m
                for m in client.get(f"/v1/conversations/{conversation}/messages").json()["messages"]
                if m["role"] == "agent"
            ]
            # The channel asks Telegram for reactions (a bot gets none unless it asks).
            assert "message_reaction" in telegram.state()["allowed_updates"]

            telegram.react(reply, "\U0001f44e", user_id=STRANGER_ID)
            wait_for(lambda: _logged(server, "a thumbs-down by someone not the owner"), 30)
            telegram.react(reply, "\U0001f44d")  # a thumbs-up marks nothing
            telegram.react(reply, "", old="\U0001f44d")
            wait_for(lambda: telegram.state()["pending_updates"] == 0, 30)
            assert _marked(client) == []

            telegram.react(reply, "\U0001f44e")
            [case] = wait_for(lambda: _marked(client), 30)
            assert (case["status"], case["message_id"]) == ("draft", agent["id"])
            assert case["owner_words"].startswith(
                "Marked wrong with a \U0001f44e reaction on Telegram"
            )
            telegram.react(reply, "", old="\U0001f44e")  # taken back: the case stays
            telegram.react(reply, "\U0001f44e")  # and given again: the same case
            done = "the owner's thumbs-down marked a reply wrong"
            wait_for(lambda: _logged(server, done) == 2, 30)
            assert [c["id"] for c in _marked(client)] == [case["id"]]
            assert len(telegram.sent(OWNER_ID)) == 1  # no reaction started a turn
            assert _said(client, conversation) == [
                ("user", "When does the museum open?", "owner"),
                ("agent", "It opens at nine.", "agent"),
            ]
    finally:
        server.stop()
