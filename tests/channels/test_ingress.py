"""The seam's pushed events and buttons, on SQLite and PostgreSQL: a channel's public ingress
verifies before anything is stored and stores through the inbox (a repeat once, no position
moved); a button pressed on the channel's copy of a question answers it only for the owner,
only while that question is open, and only with an answer the question offers; a 👎 on an
open question answers it, and on the same message once answered marks it wrong."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nightowl.channels import service as service_module
from nightowl.channels.base import (
    Capabilities,
    ChannelConfig,
    ChannelError,
    Delivered,
    HttpReply,
    HttpRequest,
    Inbound,
    Outbound,
)
from nightowl.channels.inbound import ChannelInbox
from nightowl.channels.service import ChannelRuntime, ChannelService, NoIngress, takes_http
from nightowl.router.router import Router
from nightowl.safety.vault import load_key, set_secret
from nightowl.store import channels as store_channels
from nightowl.store.changes import ChangeFeed
from nightowl.store.channels import (
    add_channel,
    claim_due,
    get_channel,
    mark_sent,
    plan_deliveries,
    save_position,
)
from nightowl.store.conversations import list_conversations, messages_after
from nightowl.store.database import Database
from nightowl.store.evals import list_cases
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import open_question, take_answer, wait_for_answer
from nightowl.store.turns import claim_batch, queue_turn
from nightowl.store.users import ensure_owner
from tests.store.test_store import RecordingQueue

OWNER = "owner-7"
TOKEN = "right-token-0123456789abcdef"
APPROVAL = {
    "buttons": [{"label": "Approve", "value": "approve"}, {"label": "Deny", "value": "deny"}]
}


class ProbeChannel:
    """A channel whose service pushes JSON events signed by a shared token header."""

    kind: ClassVar[str] = "probe"
    capabilities: ClassVar[Capabilities] = Capabilities(buttons=True)
    built: ClassVar[int] = 0

    def __init__(self, config: ChannelConfig) -> None:
        self._token = config.secret("token_secret")
        ProbeChannel.built += 1

    async def receive_http(self, request: HttpRequest) -> tuple[list[Inbound], HttpReply]:
        if request.headers.get("x-probe-token") != self._token:
            raise ChannelError("the X-Probe-Token header is wrong", permanent=True)
        body = json.loads(request.body)
        if body.get("challenge"):
            return [], HttpReply(body=json.dumps({"challenge": body["challenge"]}).encode())
        event = Inbound(body["id"], "dm", body["from"], body["text"], direct=True)
        return [event], HttpReply(status=202)

    async def listen(self, position: dict[str, Any], accept: Any) -> None:
        await asyncio.Event().wait()

    async def deliver(self, outbound: Outbound) -> Delivered:
        return Delivered()

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        return None

    async def test(self) -> str:
        return "probe"

    async def close(self) -> None:
        return None


def _request(token: str, body: dict[str, Any]) -> HttpRequest:
    return HttpRequest(
        "POST", "/v1/ingress/x", {"x-probe-token": token}, {}, json.dumps(body).encode()
    )


def test_the_ingress_verifies_then_stores_once_and_moves_no_position(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds = service_module.channel_kinds()
    monkeypatch.setattr(service_module, "channel_kinds", lambda: {**kinds, "probe": ProbeChannel})
    monkeypatch.setattr(store_channels, "KINDS", (*store_channels.KINDS, "probe"))
    key = load_key(tmp_path, None)
    with database.write() as session:
        owner = ensure_owner(session)
        set_secret(session, key, owner.id, "probe-token", TOKEN)
        probe = add_channel(
            session, owner.id, "probe", "probe", {"owner": OWNER, "token_secret": "probe-token"}
        )
        save_position(session, probe.id, {"offset": 41})
        matrix = add_channel(session, owner.id, "chat", "matrix", {"owner": "@me:x"})
    runtime = ChannelRuntime(vault_key=key, blob_dir=tmp_path, homes_dir=None, public_url="")
    router = Router(database, RecordingQueue())
    service = ChannelService(database, router, ChangeFeed(database), runtime)
    assert takes_http("probe") and not takes_http("matrix")

    async def scenario() -> None:
        said = {"id": "e1", "from": OWNER, "text": "hello"}
        with pytest.raises(ChannelError, match="X-Probe-Token"):
            await service.receive_http(probe.id, _request("forged", said))
        reply = await service.receive_http(probe.id, _request(TOKEN, {"challenge": "c"}))
        assert json.loads(reply.body) == {"challenge": "c"}
        for _ in range(2):  # the service sends it again: stored once
            assert (await service.receive_http(probe.id, _request(TOKEN, said))).status == 202
        with pytest.raises(NoIngress, match="takes no events over HTTP"):
            await service.receive_http(matrix.id, _request(TOKEN, said))
        with pytest.raises(NoIngress, match="no channel"):
            await service.receive_http("chn_missing", _request(TOKEN, said))

    built = ProbeChannel.built
    asyncio.run(scenario())
    assert ProbeChannel.built == built + 1  # built once, reused while settings stay the same
    with database.read() as session:
        [conversation] = [c for c in list_conversations(session, owner.id) if c.channel == "probe"]
        said = [(m.body, m.trust) for m in messages_after(session, conversation.id, 0)]
        assert get_channel(session, probe.id).position == {"offset": 41}
    assert said == [("hello", "owner")]


def _asked_on_the_channel(database: Database, inbox: ChannelInbox, channel_id: str) -> str:
    """The owner writes on the channel, the agent asks for an approval there, and the channel
    delivered it as external id "chat:42": the conversation."""
    with database.read() as session:
        channel = get_channel(session, channel_id)
    first = Inbound("m1", "chat", OWNER, "Pay the invoice", direct=True, address={"chat": 1})
    [conversation_id] = asyncio.run(inbox.accept(channel, [first], None))
    with database.write() as session:
        turn, _ = queue_turn(session, conversation_id, 0)
        claim_batch(session, turn.id)
        message = deliver_to_user(
            session,
            conversation_id,
            key="ask",
            body="Pay 120 EUR?",
            turn_id=turn.id,
            meta={"controls": APPROVAL, "important": True},
        )
        wait_for_answer(session, turn.id, message.id, "waiting")
        plan_deliveries(session)
        [due] = [d for d in claim_due(session, [channel_id], 60) if d.message_id == message.id]
        mark_sent(session, due.id, "chat:42")
    return conversation_id


def test_a_button_answers_only_the_owners_press_on_the_open_question(
    database: Database, tmp_path: Path
) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        channel = add_channel(session, owner.id, "phone", "matrix", {"owner": OWNER})
    inbox = ChannelInbox(database, Router(database, RecordingQueue()), tmp_path / "homes")
    conversation_id = _asked_on_the_channel(database, inbox, channel.id)

    def press(event_id: str, sender: str, answer: dict[str, Any], on: str = "chat:42") -> list[str]:
        event = Inbound(event_id, "chat", sender, "", direct=True, reaction_to=on, answer=answer)
        return asyncio.run(inbox.accept(channel, [event], None))

    assert press("p1", "someone-else", {"value": "approve"}) == []  # not the owner
    assert press("p2", OWNER, {"value": "pay-everyone"}) == []  # not a button it offers
    assert press("p3", OWNER, {"value": "approve"}, on="chat:41") == []  # another message
    with database.read() as session:
        question = open_question(session, conversation_id)
    assert question is not None  # nothing above answered it
    assert press("p4", OWNER, {"value": "approve", "text": "and more"}) == [conversation_id]
    assert press("p5", OWNER, {"value": "deny"}) == []  # answered already: the window is over
    with database.read() as session:
        assert open_question(session, conversation_id) is None
        said = [(m.role, m.body) for m in messages_after(session, conversation_id, 0)]
        turn_id = str(question.turn_id)
    with database.write() as session:
        assert take_answer(session, turn_id, question.id) == {
            "value": "approve",
            "label": "Approve",
        }
    assert said.count(("user", "Approve")) == 1 and ("user", "Deny") not in said


def test_a_thumbs_down_on_an_open_question_answers_it_and_once_answered_marks_it_wrong(
    database: Database, tmp_path: Path
) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        channel = add_channel(session, owner.id, "phone", "telegram", {"owner": OWNER})
    inbox = ChannelInbox(database, Router(database, RecordingQueue()), tmp_path / "homes")
    conversation_id = _asked_on_the_channel(database, inbox, channel.id)

    def thumbs_down(event_id: str) -> list[str]:
        event = Inbound(event_id, "chat", OWNER, "\U0001f44e", direct=True, reaction_to="chat:42")
        return asyncio.run(inbox.accept(channel, [event], None))

    assert thumbs_down("r1") == [conversation_id]  # the open approval: denied
    with database.read() as session:
        assert open_question(session, conversation_id) is None
        said = [(m.role, m.body) for m in messages_after(session, conversation_id, 0)]
        assert list_cases(session, owner.id) == []  # an answer, not a reply marked wrong
    assert ("user", "Deny") in said
    assert thumbs_down("r2") == []  # the question is closed: now it marks the message wrong
    with database.read() as session:
        [case] = list_cases(session, owner.id)
        assert case.title == "Wrong: Pay 120 EUR?" and case.status == "draft"
        assert [m.body for m in messages_after(session, conversation_id, 0)][-1] == "Deny"
