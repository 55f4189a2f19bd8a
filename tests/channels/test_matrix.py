"""The Matrix channel end to end: the real server process, a scripted model and a real Synapse
homeserver started here on 127.0.0.1 (SQLite, no federation), on SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.channels.servers import MatrixUser, Synapse, ensure_installed
from tests.e2e.store_view import rows
from tests.server import ServerProcess, say, wait_for, write_script

pytestmark = pytest.mark.slow


@pytest.fixture
def synapse(tmp_path: Path) -> Iterator[Synapse]:
    ensure_installed()
    server = Synapse(tmp_path / "synapse").start()
    try:
        yield server
    finally:
        server.stop()


def _start(tmp_path: Path, database_url: str, replies: list[dict[str, Any]]) -> ServerProcess:
    model = write_script(tmp_path / "script.json", replies)
    return ServerProcess(
        tmp_path / "data",
        database_url,
        model=model,
        env={"NIGHTOWL_CHANNEL_RELOAD_S": "0.2", "NIGHTOWL_CHANNEL_RETRY_MAX_S": "1"},
    ).start()


def _add_channel(client: httpx.Client, synapse: Synapse, bot: MatrixUser, owner: str) -> None:
    assert client.put("/v1/secrets/MATRIX_TOKEN", json={"value": bot.token}).status_code == 204
    made = client.post(
        "/v1/channels",
        json={
            "name": "matrix",
            "kind": "matrix",
            "settings": {
                "homeserver": synapse.url,
                "user_id": bot.user_id,
                "owner": owner,
                "access_token_secret": "MATRIX_TOKEN",
                "sync_timeout_ms": 1000,
            },
        },
    )
    assert made.status_code == 201, made.text
    wait_for(lambda: client.get("/v1/channels").json()[0]["status"] == "ok", timeout=30)
    tested = client.post("/v1/channels/matrix/test").json()
    assert tested == {"ok": True, "detail": f"Matrix {bot.user_id} on {synapse.url} ok"}


def _joined(user: MatrixUser, room: str, who: str) -> bool:
    members = user.call("GET", f"/_matrix/client/v3/rooms/{room}/joined_members")["joined"]
    return who in members


def _from(user: MatrixUser, room: str, sender: str) -> list[dict[str, Any]]:
    return [m for m in user.messages(room) if m["sender"] == sender]


def test_the_owners_direct_room_is_answered_there_and_a_homeserver_crash_loses_nothing(
    tmp_path: Path, database_url: str, synapse: Synapse
) -> None:
    bot, owner = synapse.register("bot"), synapse.register("owner")
    server = _start(
        tmp_path,
        database_url,
        [
            say("Hello from **nightowl**.", final=True),
            say("Still here, after the outage.", final=True),
            say("And the sync picked up where it was.", final=True),
        ],
    )
    try:
        with server.client() as client:
            _add_channel(client, synapse, bot, owner.user_id)
            room = owner.create_room([bot.user_id], direct=True)
            wait_for(lambda: _joined(owner, room, bot.user_id), 30)  # the owner's invite
            owner.say(room, "Hi there")
            [first] = wait_for(lambda: _from(owner, room, bot.user_id), 60)
            assert first["content"]["body"] == "Hello from **nightowl**."
            assert "<strong>nightowl</strong>" in first["content"]["formatted_body"]
            [conversation] = [
                c for c in client.get("/v1/conversations").json() if c["channel"] == "matrix"
            ]
            assert conversation["kind"] == "direct"
            [said] = [
                m
                for m in client.get(f"/v1/conversations/{conversation['id']}/messages").json()[
                    "messages"
                ]
                if m["role"] == "user"
            ]
            assert (said["body"], said["trust"]) == ("Hi there", "owner")

            synapse.kill()  # SIGKILL mid-conversation; the owner goes on in the web app
            path = f"/v1/conversations/{conversation['id']}/messages"
            client.post(path, json={"client_id": "w1", "text": "Are you still there?"})
            wait_for(
                lambda: client.get("/v1/channels").json()[0]["deliveries"].get("pending", 0) >= 1,
                60,
            )
            synapse.start()
            wait_for(lambda: len(_from(owner, room, bot.user_id)) >= 2, 60)
            owner.say(room, "Good.")
            wait_for(lambda: len(_from(owner, room, bot.user_id)) >= 3, 60)
            time.sleep(2)  # anything repeated would have arrived by now
            bodies = [m["content"]["body"] for m in _from(owner, room, bot.user_id)]
            assert bodies == [
                "Hello from **nightowl**.",
                "Still here, after the outage.",
                "And the sync picked up where it was.",
            ]
            users = [m for m in client.get(path).json()["messages"] if m["role"] == "user"]
            assert [m["body"] for m in users] == ["Hi there", "Are you still there?", "Good."]
            assert client.get("/v1/channels").json()[0]["deliveries"] == {"sent": 3}
    finally:
        server.stop()


def test_in_a_group_room_the_agent_answers_only_when_addressed(
    tmp_path: Path, database_url: str, synapse: Synapse
) -> None:
    bot, owner, alice = (
        synapse.register("bot"),
        synapse.register("owner"),
        synapse.register("alice"),
    )
    server = _start(tmp_path, database_url, [say("The meeting is at 10.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, synapse, bot, owner.user_id)
            room = owner.create_room([bot.user_id, alice.user_id], name="Team")
            alice.join(room)
            wait_for(lambda: _joined(owner, room, bot.user_id), 30)
            alice.say(room, "Morning everyone, coffee anyone?")
            time.sleep(4)  # long enough for a sync and a batching window
            assert _from(owner, room, bot.user_id) == []
            assert [
                c for c in client.get("/v1/conversations").json() if c["channel"] == "matrix"
            ] == []
            alice.say(room, "bot: when is the meeting?")
            [answer] = wait_for(lambda: _from(owner, room, bot.user_id), 60)
            assert answer["content"]["body"] == "The meeting is at 10."
            [conversation] = [
                c for c in client.get("/v1/conversations").json() if c["channel"] == "matrix"
            ]
            assert conversation["kind"] == "group"
            messages = client.get(f"/v1/conversations/{conversation['id']}/messages").json()[
                "messages"
            ]
            assert messages[0]["trust"] == "untrusted"
            assert alice.user_id in messages[0]["body"]
    finally:
        server.stop()


def test_an_invitation_from_a_stranger_is_declined(
    tmp_path: Path, database_url: str, synapse: Synapse
) -> None:
    bot, owner, mallory = (
        synapse.register("bot"),
        synapse.register("owner"),
        synapse.register("mallory"),
    )
    server = _start(tmp_path, database_url, [say("hello", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, synapse, bot, owner.user_id)
            room = mallory.create_room([bot.user_id], direct=True)

            def left() -> bool:
                state = mallory.call(
                    "GET", f"/_matrix/client/v3/rooms/{room}/state/m.room.member/{bot.user_id}"
                )
                return state.get("membership") == "leave"

            wait_for(left, 30)
            assert rows(
                server.env["NIGHTOWL_DATABASE_URL"], "SELECT count(*) FROM channel_bindings"
            ) == [(0,)]
    finally:
        server.stop()


def test_a_question_is_answered_by_a_reply_and_files_go_both_ways(
    tmp_path: Path, database_url: str, synapse: Synapse
) -> None:
    bot, owner = synapse.register("bot"), synapse.register("owner")
    buttons = [{"label": "Book", "value": "book"}, {"label": "Not now", "value": "no"}]
    server = _start(
        tmp_path,
        database_url,
        [
            say("Book the table for Friday?", buttons=buttons, ask="approval"),
            say("Booked; the confirmation is attached.", files=["confirmation.txt"], final=True),
            say("Got your notes.", final=True),
        ],
    )
    try:
        with server.client() as client:
            me = client.get("/v1/me").json()["id"]
            home = tmp_path / "data" / "homes" / me
            home.mkdir(parents=True, exist_ok=True)
            (home / "confirmation.txt").write_text("Table for 4, Friday 20:00.")
            _add_channel(client, synapse, bot, owner.user_id)
            room = owner.create_room([bot.user_id], direct=True)
            wait_for(lambda: _joined(owner, room, bot.user_id), 30)
            owner.say(room, "Please book our usual table.")
            [question] = wait_for(lambda: _from(owner, room, bot.user_id), 60)
            body = question["content"]["body"]
            assert "Reply with one of: **Book** / **Not now**" in body
            assert f"{server.url}/#c=" in body  # and a link to answer in the web app
            owner.say(room, "book")
            wait_for(lambda: len(_from(owner, room, bot.user_id)) >= 3, 60)
            sent = _from(owner, room, bot.user_id)
            attachment, text = sent[1], sent[2]
            assert text["content"]["body"] == (
                "Booked; the confirmation is attached.\n\nAttached: confirmation.txt"
            )
            assert attachment["content"]["msgtype"] == "m.file"
            assert attachment["content"]["body"] == "confirmation.txt"
            server_name, media = attachment["content"]["url"].removeprefix("mxc://").split("/")
            downloaded = httpx.get(
                f"{synapse.url}/_matrix/client/v1/media/download/{server_name}/{media}",
                headers={"Authorization": f"Bearer {owner.token}"},
            )
            assert downloaded.content == b"Table for 4, Friday 20:00."
            [conversation] = [
                c for c in client.get("/v1/conversations").json() if c["channel"] == "matrix"
            ]
            path = f"/v1/conversations/{conversation['id']}/messages"
            answer = [m for m in client.get(path).json()["messages"] if m["body"] == "Book"]
            assert len(answer) == 1 and answer[0]["trust"] == "owner"  # stored as the answer

            uploaded = owner.call(
                "POST",
                "/_matrix/media/v3/upload",
                params={"filename": "notes.txt"},
                content=b"Remember the cake.",
                headers={"Content-Type": "text/plain"},
            )
            owner.say(
                room,
                "notes.txt",
                msgtype="m.file",
                url=uploaded["content_uri"],
                info={"mimetype": "text/plain", "size": 18},
            )
            wait_for(lambda: len(_from(owner, room, bot.user_id)) >= 4, 60)
            assert _from(owner, room, bot.user_id)[3]["content"]["body"] == "Got your notes."
            received = client.get(path).json()["messages"][-2]
            assert "~/inbox/" in received["body"]
            [saved] = list((home / "inbox").iterdir())
            assert saved.name.endswith("notes.txt")
            assert saved.read_bytes() == b"Remember the cake."
    finally:
        server.stop()


def test_an_approval_is_answered_by_the_owners_reaction_and_other_reactions_say_nothing(
    tmp_path: Path, database_url: str, synapse: Synapse
) -> None:
    bot, owner = synapse.register("bot"), synapse.register("owner")
    buttons = [{"label": "Approve", "value": "approve"}, {"label": "Deny", "value": "deny"}]
    server = _start(
        tmp_path,
        database_url,
        [
            say("Pay the Friday invoice?", buttons=buttons, ask="approval"),
            say("Paid.", final=True),
        ],
    )
    try:
        with server.client() as client:
            _add_channel(client, synapse, bot, owner.user_id)
            room = owner.create_room([bot.user_id], direct=True)
            wait_for(lambda: _joined(owner, room, bot.user_id), 30)
            owner.say(room, "Is the invoice paid?")
            [question] = wait_for(lambda: _from(owner, room, bot.user_id), 60)
            assert (
                "Or react: 1\ufe0f\u20e3 Approve, 2\ufe0f\u20e3 Deny" in question["content"]["body"]
            )
            owner.react(room, question["event_id"], "\U0001f600")  # a smile answers nothing
            time.sleep(2)
            assert len(_from(owner, room, bot.user_id)) == 1
            owner.react(room, question["event_id"], "\U0001f44d")  # thumbs up: Approve
            wait_for(lambda: len(_from(owner, room, bot.user_id)) >= 2, 60)
            assert _from(owner, room, bot.user_id)[1]["content"]["body"] == "Paid."
            [conversation] = [
                c for c in client.get("/v1/conversations").json() if c["channel"] == "matrix"
            ]
            path = f"/v1/conversations/{conversation['id']}/messages"
            said = [(m["role"], m["body"], m["trust"]) for m in client.get(path).json()["messages"]]
            assert ("user", "Approve", "owner") in said  # stored as the answer, once
            assert not any("\U0001f600" in body or "\U0001f44d" in body for _, body, _ in said)
    finally:
        server.stop()


def _marked(client: httpx.Client) -> list[dict[str, Any]]:
    """The owner's eval cases made by marking a reply wrong (the shipped set left out)."""
    cases = client.get("/v1/evals/cases").json()["cases"]
    return [c for c in cases if c["source"] == "marked"]


def _logged(server: ServerProcess, text: str) -> int:
    return sum(text in line.get("message", "") for line in server.log_lines())


def test_the_owners_thumbs_down_marks_the_reply_wrong_once_and_a_strangers_does_nothing(
    tmp_path: Path, database_url: str, synapse: Synapse
) -> None:
    bot, owner = synapse.register("bot"), synapse.register("owner")
    stranger = synapse.register("stranger")
    server = _start(tmp_path, database_url, [say("It opens at nine.", final=True)])
    try:
        with server.client() as client:
            _add_channel(client, synapse, bot, owner.user_id)
            room = owner.create_room([bot.user_id], direct=True)
            wait_for(lambda: _joined(owner, room, bot.user_id), 30)
            asked = owner.say(room, "When does the museum open?")
            [reply] = wait_for(lambda: _from(owner, room, bot.user_id), 60)
            [conversation] = [
                c for c in client.get("/v1/conversations").json() if c["channel"] == "matrix"
            ]
            path = f"/v1/conversations/{conversation['id']}/messages"
            [agent] = [m for m in client.get(path).json()["messages"] if m["role"] == "agent"]
            owner.call(
                "POST",
                f"/_matrix/client/v3/rooms/{room}/invite",
                json={"user_id": stranger.user_id},
            )
            stranger.join(room)

            stranger.react(room, reply["event_id"], "\U0001f44e")
            wait_for(lambda: _logged(server, "a thumbs-down by someone not the owner"), 60)
            owner.react(room, asked, "\U0001f44e")  # the owner's own message: no agent reply
            wait_for(lambda: _logged(server, "a thumbs-down marked nothing wrong"), 60)
            owner.react(room, reply["event_id"], "\U0001f600")  # a smile marks nothing
            assert _marked(client) == []

            owner.react(room, reply["event_id"], "\U0001f44e")
            [case] = wait_for(lambda: _marked(client), 60)
            assert case["status"] == "draft"
            assert (case["conversation_id"], case["message_id"]) == (
                conversation["id"],
                agent["id"],
            )
            assert case["failed_reply"] == "It opens at nine."
            assert case["owner_words"].startswith(
                "Marked wrong with a \U0001f44e reaction on Matrix"
            )
            # Again, with a skin tone: the same case, not another.
            owner.react(room, reply["event_id"], "\U0001f44e\U0001f3fd")
            wait_for(
                lambda: _logged(server, "the owner's thumbs-down marked a reply wrong") == 2, 60
            )
            assert [c["id"] for c in _marked(client)] == [case["id"]]
            # Reactions start no turn and become no message.
            assert len(_from(owner, room, bot.user_id)) == 1
            said = [m["body"] for m in client.get(path).json()["messages"]]
            assert said == ["When does the museum open?", "It opens at nine."]
            turns = rows(
                database_url,
                "SELECT status FROM turns WHERE conversation_id = :c",
                c=conversation["id"],
            )
            assert turns == [("done",)]
    finally:
        server.stop()
