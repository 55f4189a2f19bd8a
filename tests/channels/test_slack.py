"""The Slack channel end to end: the real server process, a scripted model and the Slack
stand-in (tests/channels/slack_api.py: Slack's Web API, Socket Mode and signed HTTP events on
127.0.0.1), on SQLite and PostgreSQL. Real Slack is not reachable from here: what these tests
show was checked against the stand-in only."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from nightowl.channels.base import ChannelConfig, ChannelError
from nightowl.channels.slack import SlackChannel
from nightowl.channels.slack_blocks import markdown_mrkdwn, message_blocks
from nightowl.channels.slack_events import verify
from tests.channels.slack_api import ALICE, BOT, GENERAL, OWNER, OWNER_DM, SlackStandIn
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    stand_in = SlackStandIn().start()
    try:
        yield stand_in
    finally:
        stand_in.stop()


def _start(tmp_path: Path, database_url: str, replies: list[dict[str, Any]]) -> ServerProcess:
    model = write_script(tmp_path / "script.json", replies)
    server = ServerProcess(
        tmp_path / "data",
        database_url,
        model=model,
        env={
            "NIGHTOWL_CHANNEL_RELOAD_S": "0.2",
            "NIGHTOWL_CHANNEL_RETRY_MAX_S": "1",
            "NIGHTOWL_CHANNEL_DELIVERY_LEASE_S": "3",
        },
    )
    server.env["NIGHTOWL_PUBLIC_URL"] = server.url  # where Slack sends HTTP events
    return server.start()


def _add_channel(
    client: httpx.Client, slack: SlackStandIn, *, socket: bool = True, http: bool = True
) -> str:
    """Add the Slack channel (Socket Mode and/or HTTP events); its id."""
    settings: dict[str, Any] = {
        "api_url": slack.api_url,
        "owner": OWNER,
        "bot_token_secret": "SLACK_BOT_TOKEN",
    }
    secrets = {"SLACK_BOT_TOKEN": slack.bot_token}
    if socket:
        settings["app_token_secret"] = "SLACK_APP_TOKEN"
        secrets["SLACK_APP_TOKEN"] = slack.app_token
    if http:
        settings["signing_secret_secret"] = "SLACK_SIGNING_SECRET"
        secrets["SLACK_SIGNING_SECRET"] = slack.signing_secret
    for name, value in secrets.items():
        assert client.put(f"/v1/secrets/{name}", json={"value": value}).status_code == 204
    made = client.post(
        "/v1/channels", json={"name": "slack", "kind": "slack", "settings": settings}
    )
    assert made.status_code == 201, made.text
    wait_for(lambda: [c for c in client.get("/v1/channels").json() if c["status"] == "ok"], 30)
    tested = client.post("/v1/channels/slack/test").json()
    mode = "Socket Mode ok" if socket else "Socket Mode off (events come over HTTP)"
    assert tested == {"ok": True, "detail": f"Slack Nightowl Test as nightowl ({BOT}) ok; {mode}"}
    if socket:
        wait_for(slack.sockets, 30)
    [channel] = client.get("/v1/channels").json()
    slack.events_url = channel["ingress_url"]
    return slack.events_url


def _conversations(client: httpx.Client, kind: str) -> list[dict[str, Any]]:
    return [
        c
        for c in client.get("/v1/conversations").json()
        if c["channel"] == "slack" and c["kind"] == kind
    ]


def _conversation(client: httpx.Client, kind: str) -> dict[str, Any]:
    [found] = _conversations(client, kind)
    return found


def _messages(client: httpx.Client, conversation: str) -> list[dict[str, Any]]:
    return list(client.get(f"/v1/conversations/{conversation}/messages").json()["messages"])


def _in_thread(slack: SlackStandIn, root: str) -> list[dict[str, Any]]:
    return [m for m in slack.from_bot(GENERAL) if m.get("thread_ts") == root]


@pytest.mark.slow
def test_a_thread_burst_is_one_turn_and_the_owners_direct_message_does_not_wait_for_it(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    # The seed scenario: in a channel thread the owner asks the bot to add Dana to a meeting,
    # then Lee, then thanks: one turn. While that turn works (a slow model call), the owner's
    # direct message is answered at once, not after the thread's work.
    script = tmp_path / "script.json"
    server = _start(tmp_path, database_url, [say("Hi, I'm here.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, slack)
            slack.say(OWNER, OWNER_DM, "hi")
            wait_for(lambda: slack.from_bot(OWNER_DM), 60)
            # The direct conversation's next model call is its second; the thread's its first.
            write_script(
                script,
                [
                    {"delay": 8, **say("Added Dana and Lee to Thursday's meeting.", final=True)},
                    say("Moved it to *Thursday*.", final=True),
                ],
            )
            root = slack.say(OWNER, GENERAL, f"<@{BOT}> please add Dana to Thursday's meeting")
            root_ts = root["event"]["ts"]
            slack.say_burst(OWNER, GENERAL, ["and Lee", "thanks!"], thread_ts=root_ts)
            [thread] = wait_for(lambda: _conversations(client, "group"), 30)
            url = server.env["NIGHTOWL_DATABASE_URL"]
            wait_for(
                lambda: rows(
                    url, "SELECT id FROM model_calls WHERE conversation_id = :c", c=thread["id"]
                ),
                30,
            )
            slack.say(OWNER, OWNER_DM, "actually, move it to Thursday")
            wait_for(lambda: len(slack.from_bot(OWNER_DM)) >= 2, 30)
            assert slack.from_bot(OWNER_DM)[1]["text"] == "Moved it to _Thursday_."
            assert _in_thread(slack, root_ts) == []  # the thread's turn is still working
            [answer] = wait_for(lambda: _in_thread(slack, root_ts), 60)
            assert answer["text"] == "Added Dana and Lee to Thursday's meeting."

            direct = _conversation(client, "direct")
            turns = {
                conversation: rows(
                    url,
                    "SELECT status, priority, started_at, finished_at, batch_first_seq, "
                    "batch_last_seq FROM turns WHERE conversation_id = :c ORDER BY created_at",
                    c=conversation,
                )
                for conversation in (thread["id"], direct["id"])
            }
            [group_turn] = turns[thread["id"]]
            assert (group_turn[0], group_turn[1], group_turn[4], group_turn[5]) == (
                "done",
                2,
                1,
                3,
            )  # one turn took the three thread messages
            correction = turns[direct["id"]][1]
            assert (correction[0], correction[1]) == ("done", 1)  # OWNER_DIRECT
            assert _when(correction[3]) < _when(group_turn[3])  # answered before the thread's

            said = [(m["role"], m["body"], m["trust"]) for m in _messages(client, thread["id"])]
            assert said == [
                ("user", f"<@{BOT}> please add Dana to Thursday's meeting", "owner"),
                ("user", "and Lee", "owner"),
                ("user", "thanks!", "owner"),
                ("agent", "Added Dana and Lee to Thursday's meeting.", "agent"),
            ]
            assert [m["body"] for m in _messages(client, direct["id"])][-2:] == [
                "actually, move it to Thursday",
                "Moved it to *Thursday*.",
            ]
    finally:
        server.stop()


def _when(value: Any) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(value) if isinstance(value, str) else value).timestamp()


@pytest.mark.slow
def test_an_event_sent_over_socket_mode_and_http_is_stored_once(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("Got it once.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, slack)
            sent = slack.say(OWNER, OWNER_DM, "hello, twice", via=("socket", "http"))
            assert sent["statuses"] == [200]
            [envelope] = sent["envelopes"]
            wait_for(lambda: envelope in slack.acked, 30)  # acknowledged once stored
            again = slack.post_http(
                {k: v for k, v in sent.items() if k not in ("statuses", "envelopes")}, retry=1
            )
            assert again[0] == 200  # Slack's retry of the same event id
            wait_for(lambda: slack.from_bot(OWNER_DM), 60)
            direct = _conversation(client, "direct")
            users = [m for m in _messages(client, direct["id"]) if m["role"] == "user"]
            assert [(m["body"], m["trust"]) for m in users] == [("hello, twice", "owner")]
            url = server.env["NIGHTOWL_DATABASE_URL"]
            assert rows(
                url, "SELECT count(*) FROM triggers WHERE conversation_id = :c", c=direct["id"]
            ) == [(1,)]
            assert [m["text"] for m in slack.from_bot(OWNER_DM)] == ["Got it once."]
    finally:
        server.stop()


@pytest.mark.slow
def test_socket_mode_reconnects_when_asked_and_a_resent_envelope_is_stored_once(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("Still here.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, slack, http=False)
            slack.refresh_connections()  # Slack's periodic "disconnect: refresh_requested"
            wait_for(lambda: slack.calls.count("apps.connections.open") >= 3, 30)  # 2: test()
            wait_for(lambda: slack.sockets() == 1, 30)
            slack.lose_acks = 1  # the first acknowledgement is lost: Slack sends it again
            sent = slack.say(OWNER, OWNER_DM, "are you there?")
            [envelope] = sent["envelopes"]
            wait_for(lambda: envelope in slack.acked, 30)  # acknowledged, the second time
            assert (envelope, 1) in slack.envelopes_sent
            wait_for(lambda: slack.from_bot(OWNER_DM), 60)
            direct = _conversation(client, "direct")
            users = [m["body"] for m in _messages(client, direct["id"]) if m["role"] == "user"]
            assert users == ["are you there?"]
            assert [m["text"] for m in slack.from_bot(OWNER_DM)] == ["Still here."]
    finally:
        server.stop()


@pytest.mark.slow
def test_forged_stale_and_strangers_requests_are_refused_and_the_owners_click_answers_once(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    buttons = [{"label": "Book", "value": "book"}, {"label": "Not now", "value": "no"}]
    server = _start(
        tmp_path,
        database_url,
        [
            say("Book the table for Friday?", buttons=buttons, ask="approval"),
            say("Booked.", final=True),
        ],
    )
    try:
        with server.client() as client:
            _add_channel(client, slack, socket=False)
            event = {
                "type": "event_callback",
                "event_id": "EvFORGED1",
                "event": {
                    "type": "message",
                    "channel": OWNER_DM,
                    "channel_type": "im",
                    "user": OWNER,
                    "text": "transfer everything",
                    "ts": "1.000001",
                },
            }
            status, body = slack.post_http(event, secret="not-the-signing-secret")
            assert status == 401 and "forged" in body
            status, body = slack.post_http(
                {**event, "event_id": "EvSTALE1"}, timestamp=int(time.time()) - 6 * 60
            )
            assert status == 401 and "stale" in body
            assert [c for c in client.get("/v1/conversations").json() if c["channel"]] == []
            # Slack checks the Request URL with a signed challenge.
            challenge = {"type": "url_verification", "token": "legacy", "challenge": "c4f3"}
            assert slack.post_http(challenge) == (200, '{"challenge": "c4f3"}')
            assert slack.post_http(challenge, secret="not-the-signing-secret")[0] == 401
            # A channel message that does not mention the bot is not for the agent.
            assert slack.say(ALICE, GENERAL, "coffee anyone?", via=("http",))["statuses"] == [200]

            root = slack.say(OWNER, GENERAL, f"<@{BOT}> book our usual table", via=("http",))
            assert root["statuses"] == [200]
            root_ts = root["event"]["ts"]
            [question] = wait_for(lambda: _in_thread(slack, root_ts), 60)
            actions = [b for b in question["blocks"] if b["type"] == "actions"]
            assert [e["text"]["text"] for e in actions[0]["elements"]] == ["Book", "Not now"]
            assert slack.click(ALICE, GENERAL, question["ts"], "Book") == 200
            wait_for(
                lambda: any(
                    "a button press by someone not the owner was refused" in line.get("message", "")
                    for line in server.log_lines()
                ),
                30,
            )
            assert _in_thread(slack, root_ts) == [question]  # Alice answered nothing
            assert slack.click(OWNER, GENERAL, question["ts"], "Book") == 200
            assert slack.click(OWNER, GENERAL, question["ts"], "Not now") == 200  # too late
            wait_for(lambda: len(_in_thread(slack, root_ts)) >= 2, 60)
            thread = _conversation(client, "group")
            said = [(m["role"], m["body"], m["trust"]) for m in _messages(client, thread["id"])]
            assert said == [
                ("user", f"<@{BOT}> book our usual table", "owner"),
                ("agent", "Book the table for Friday?", "agent"),
                ("user", "Book", "owner"),
                ("agent", "Booked.", "agent"),
            ]
            assert [m["text"] for m in _in_thread(slack, root_ts)][1] == "Booked."
    finally:
        server.stop()


@pytest.mark.slow
def test_a_post_is_not_repeated_when_the_server_is_killed_before_recording_it(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("Exactly once.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, slack)
            slack.hold.set()  # the post is stored; its answer waits
            slack.say(OWNER, OWNER_DM, "say it once")
            wait_for(lambda: slack.from_bot(OWNER_DM), 60)
        server.kill()  # after Slack has the message, before the delivery is recorded
        slack.hold.clear()
        server.start()
        with server.client() as client:
            wait_for(lambda: client.get("/v1/channels").json()[0]["deliveries"] == {"sent": 1}, 60)
        assert [m["text"] for m in slack.from_bot(OWNER_DM)] == ["Exactly once."]
        assert slack.calls.count("chat.postMessage") == 1
        assert "conversations.history" in slack.calls  # the recovery looked for it
        url = server.env["NIGHTOWL_DATABASE_URL"]
        [(state, external_id)] = rows(url, "SELECT state, external_id FROM channel_deliveries")
        [posted] = slack.from_bot(OWNER_DM)
        assert (state, external_id) == ("sent", f"{OWNER_DM}:{posted['ts']}")
    finally:
        server.stop()


@pytest.mark.slow
def test_a_rate_limited_post_is_retried_after_retry_after_and_lands_once(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("Worth the wait.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, slack)
            slack.rate_limit_posts = 1  # 429, Retry-After: 1
            slack.say(OWNER, OWNER_DM, "hello")
            wait_for(lambda: slack.from_bot(OWNER_DM), 60)
            wait_for(lambda: client.get("/v1/channels").json()[0]["deliveries"] == {"sent": 1}, 30)
        assert [m["text"] for m in slack.from_bot(OWNER_DM)] == ["Worth the wait."]
        first, second = [at for method, at in slack.timed_calls if method == "chat.postMessage"]
        assert second - first >= 1.0  # not before Retry-After
        url = server.env["NIGHTOWL_DATABASE_URL"]
        assert rows(url, "SELECT state, attempts FROM channel_deliveries") == [("sent", 2)]
    finally:
        server.stop()


@pytest.mark.slow
def test_files_go_both_ways(tmp_path: Path, database_url: str, slack: SlackStandIn) -> None:
    server = _start(
        tmp_path,
        database_url,
        [say("Booked; the confirmation is attached.", files=["confirmation.txt"], final=True)],
    )
    try:
        with server.client() as client:
            me = client.get("/v1/me").json()["id"]
            home = tmp_path / "data" / "homes" / me
            home.mkdir(parents=True, exist_ok=True)
            (home / "confirmation.txt").write_text("Table for 4, Friday 20:00.")
            _add_channel(client, slack)
            slack.say(
                OWNER, OWNER_DM, "my notes", file=("notes.txt", "text/plain", b"Remember the cake.")
            )
            wait_for(lambda: len(slack.from_bot(OWNER_DM)) >= 2, 60)
            shared, text = slack.from_bot(OWNER_DM)
            [uploaded] = shared["files"]
            assert uploaded["name"] == "confirmation.txt"
            assert slack.files[uploaded["id"]]["data"] == b"Table for 4, Friday 20:00."
            assert text["text"] == "Booked; the confirmation is attached."
            assert slack.calls.count("files.getUploadURLExternal") == 1
            [saved] = list((home / "inbox").iterdir())
            assert saved.name.endswith("notes.txt")
            assert saved.read_bytes() == b"Remember the cake."  # fetched with the bot token
            direct = _conversation(client, "direct")
            [said] = [m for m in _messages(client, direct["id"]) if m["role"] == "user"]
            assert said["body"].startswith("my notes") and "~/inbox/" in said["body"]
    finally:
        server.stop()


def test_markdown_is_rendered_as_slack_mrkdwn_with_entities_escaped() -> None:
    markdown = (
        "# Plan\n**Bold**, *italic*, `a<b>` and [the site](https://example.org/?a=1) "
        "for <!channel> & co\n- one\n1. first\n> quoted\n```\nx < y **not bold**\n```"
    )
    assert markdown_mrkdwn(markdown).split("\n") == [
        "*Plan*",
        "*Bold*, _italic_, `a&lt;b&gt;` and <https://example.org/?a=1|the site> "
        "for &lt;!channel&gt; &amp; co",
        "\u2022 one",
        "1. first",
        ">quoted",
        "```",
        "x &lt; y **not bold**",
        "```",
    ]


def test_a_question_becomes_buttons_that_carry_their_answers() -> None:
    buttons = [{"label": "Approve", "value": "approve"}, {"label": "Deny", "value": "deny"}]
    blocks = message_blocks("Pay the invoice?", {"controls": {"buttons": buttons}})
    assert blocks[0] == {"type": "section", "text": {"type": "mrkdwn", "text": "Pay the invoice?"}}
    values = [json.loads(e["value"]) for e in blocks[1]["elements"]]
    assert values == [{"value": "approve"}, {"value": "deny"}]
    draft = message_blocks("Send this?", {"controls": {"draft": "Hi Dana"}})
    assert "&gt; Hi Dana" not in draft[0]["text"]["text"]  # a quote, not escaped text
    assert draft[0]["text"]["text"].endswith(">Hi Dana")
    answers = [json.loads(e["value"]) for e in draft[1]["elements"]]
    assert answers == [{"action": "send"}, {"action": "discard"}]


def test_a_request_is_refused_when_unsigned_forged_or_stale() -> None:
    secret, body, now = "s3cret", b'{"type":"event_callback"}', time.time()
    stamp = str(int(now))
    signed = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    good = {"x-slack-request-timestamp": stamp, "x-slack-signature": str(signed)}
    verify(secret, good, body, now)  # Slack's own: accepted
    for headers, reason in [
        ({}, "not signed"),
        ({**good, "x-slack-signature": "v0=" + "0" * 64}, "forged"),
        (good, "stale"),
    ]:
        with pytest.raises(ChannelError, match=reason) as refused:
            verify(secret, headers, body, now + (400 if reason == "stale" else 0))
        assert refused.value.permanent


@pytest.mark.parametrize(
    ("settings", "wanted"),
    [
        ({"owner": "U0OWNER", "signing_secret_secret": "SIGN"}, "bot_token_secret"),
        ({"bot_token_secret": "BOT", "signing_secret_secret": "SIGN"}, "owner"),
        ({"owner": "U0OWNER", "bot_token_secret": "BOT"}, "app_token_secret"),
        ({"owner": "U0OWNER", "bot_token_secret": "APP", "app_token_secret": "APP"}, "xoxb"),
        ({"owner": "U0OWNER", "bot_token_secret": "BOT", "app_token_secret": "MISSING"}, "vault"),
        ({"owner": "U0OWNER", "bot_token_secret": "BOT", "app_token_secret": "BOT"}, "xapp"),
    ],
)
def test_settings_are_checked_when_the_channel_is_built(
    settings: dict[str, Any], wanted: str
) -> None:
    secrets = {"BOT": "xoxb-1", "APP": "xapp-1", "SIGN": "s3cret"}
    with pytest.raises(ChannelError, match=wanted) as refused:
        SlackChannel(ChannelConfig("c", "slack", "u", settings, secrets))
    assert refused.value.permanent


def test_the_channel_test_says_what_works_and_what_to_fix(slack: SlackStandIn) -> None:
    def tested(bot: str, app: str) -> str:
        settings = {
            "api_url": slack.api_url,
            "owner": OWNER,
            "bot_token_secret": "BOT",
            "app_token_secret": "APP",
        }
        channel = SlackChannel(ChannelConfig("c", "slack", "u", settings, {"BOT": bot, "APP": app}))
        try:
            return asyncio.run(channel.test())
        except ChannelError as error:
            assert error.permanent
            return f"refused: {error}"
        finally:
            asyncio.run(channel.close())

    assert tested(slack.bot_token, slack.app_token) == (
        f"Slack Nightowl Test as nightowl ({BOT}) ok; Socket Mode ok"
    )
    wrong_app = tested(slack.bot_token, "xapp-1-revoked")
    assert wrong_app.startswith(f"refused: Slack Nightowl Test as nightowl ({BOT}) ok, but")
    assert "invalid_auth" in wrong_app and "turn Socket Mode on" in wrong_app
    wrong_bot = tested("xoxb-revoked", slack.app_token)
    assert "refused the bot token (invalid_auth)" in wrong_bot and "xoxb-" in wrong_bot


def _marked(client: httpx.Client) -> list[dict[str, Any]]:
    """The owner's eval cases made by marking a reply wrong (the shipped set left out)."""
    return [c for c in client.get("/v1/evals/cases").json()["cases"] if c["source"] == "marked"]


def _logged(server: ServerProcess, text: str) -> int:
    return sum(text in line.get("message", "") for line in server.log_lines())


@pytest.mark.slow
def test_the_owners_thumbs_down_reaction_marks_the_reply_wrong_once(
    tmp_path: Path, database_url: str, slack: SlackStandIn
) -> None:
    server = _start(tmp_path, database_url, [say("It opens at nine.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, slack)
            asked = slack.say(OWNER, OWNER_DM, "When does the museum open?", via=("http",))
            [reply] = wait_for(lambda: slack.from_bot(OWNER_DM), 60)
            conversation = _conversation(client, "direct")
            [agent] = [m for m in _messages(client, conversation["id"]) if m["role"] == "agent"]

            slack.react(ALICE, OWNER_DM, reply["ts"], "-1")
            wait_for(lambda: _logged(server, "a thumbs-down by someone not the owner"), 30)
            slack.react(OWNER, OWNER_DM, asked["event"]["ts"], "-1")  # the owner's own message
            wait_for(lambda: _logged(server, "a thumbs-down marked nothing wrong"), 30)
            assert slack.react(OWNER, OWNER_DM, reply["ts"], "+1")["statuses"] == [200]
            assert _marked(client) == []

            slack.react(OWNER, OWNER_DM, reply["ts"], "-1")
            [case] = wait_for(lambda: _marked(client), 30)
            assert (case["status"], case["message_id"]) == ("draft", agent["id"])
            assert case["owner_words"].startswith(
                "Marked wrong with a \U0001f44e reaction on Slack"
            )
            # Slack's other name for it, with a skin tone: the same case.
            slack.react(OWNER, OWNER_DM, reply["ts"], "thumbsdown::skin-tone-3", via=("socket",))
            done = "the owner's thumbs-down marked a reply wrong"
            wait_for(lambda: _logged(server, done) == 2, 30)
            assert [c["id"] for c in _marked(client)] == [case["id"]]
            # No reaction became a message or a turn.
            assert len(slack.from_bot(OWNER_DM)) == 1
            assert [m["body"] for m in _messages(client, conversation["id"])] == [
                "When does the museum open?",
                "It opens at nine.",
            ]
    finally:
        server.stop()
