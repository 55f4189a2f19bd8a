"""The outbound relay over the real store (SQLite and PostgreSQL), with an in-memory channel:
each agent message reaches each bound channel exactly once, errors and rate limits are retried
with backoff, a channel that is down loses nothing, and an attempt that died mid-send is
checked before it is repeated."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import update

from nightowl.channels.base import Capabilities, ChannelError, Delivered, Outbound
from nightowl.channels.relay import OutboundRelay, backoff_s
from nightowl.store.channel_tables import ChannelDelivery
from nightowl.store.channels import (
    add_channel,
    claim_due,
    deliveries_of,
    delivery_counts,
    plan_deliveries,
    thread_of,
)
from nightowl.store.conversations import append_message
from nightowl.store.database import Database
from nightowl.store.tables import utcnow
from nightowl.store.users import ensure_owner


class MemoryChannel:
    """A channel that keeps what it was given; it can be down, rate-limited or refuse."""

    kind: ClassVar[str] = "memory"
    capabilities: ClassVar[Capabilities] = Capabilities(check_before_retry=True)

    def __init__(self) -> None:
        self.shown: list[Outbound] = []
        self.down = False
        self.rate_limited = 0
        self.refuse = False
        self.checks = 0

    async def deliver(self, outbound: Outbound) -> Delivered:
        if self.down:
            raise ChannelError("the server is down")
        if self.rate_limited:
            self.rate_limited -= 1
            raise ChannelError("slow down", retry_after=0.0)
        if self.refuse:
            raise ChannelError("no such room", permanent=True)
        self.shown.append(outbound)
        return Delivered(f"ext-{outbound.message_id}")

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        self.checks += 1
        for shown in self.shown:
            if shown.message_id == outbound.message_id:
                return Delivered(f"ext-{outbound.message_id}")
        return None

    async def listen(self, position: dict[str, Any], accept: Any) -> None:
        await asyncio.Event().wait()

    async def test(self) -> str:
        return "ok"

    async def close(self) -> None:
        pass


def _setup(database: Database) -> tuple[str, str]:
    with database.write() as session:
        owner = ensure_owner(session)
        channel = add_channel(session, owner.id, "mem", "matrix", {"owner": "@o:x"})
        thread = thread_of(
            session, channel, "!room", kind="direct", title="", address={"room_id": "!room"}
        )
    return channel.id, thread.conversation_id


def _say(database: Database, conversation_id: str, text: str, role: str = "agent") -> str:
    with database.write() as session:
        trust = "agent" if role == "agent" else "owner"
        return append_message(session, conversation_id, role=role, body=text, trust=trust).id


def _relay(database: Database, channel_id: str, channel: MemoryChannel, tmp: Path) -> OutboundRelay:
    return OutboundRelay(
        database,
        lambda: {channel_id: channel},  # type: ignore[dict-item]
        tmp,
        lambda conversation: f"http://web/#c={conversation}",
        lease_s=60,
        max_backoff_s=0.05,
    )


def _make_due(database: Database) -> None:
    with database.write() as session:
        session.execute(update(ChannelDelivery).values(next_at=utcnow() - timedelta(seconds=1)))


def test_each_agent_message_is_delivered_once_and_the_owners_own_are_not(
    database: Database, tmp_path: Path
) -> None:
    channel_id, conversation = _setup(database)
    channel = MemoryChannel()
    relay = _relay(database, channel_id, channel, tmp_path)
    _say(database, conversation, "a question", role="user")
    first = _say(database, conversation, "first answer")
    second = _say(database, conversation, "second answer")
    asyncio.run(relay.run_once())
    asyncio.run(relay.run_once())  # nothing new: nothing planned or sent again
    with database.write() as session:
        assert plan_deliveries(session) == 0
    assert [o.markdown for o in channel.shown] == ["first answer", "second answer"]
    assert [o.message_id for o in channel.shown] == [first, second]
    with database.read() as session:
        assert deliveries_of(session, first) == [(channel_id, "sent", 1, f"ext-{first}")]


def test_a_channel_that_is_down_loses_nothing_and_gets_everything_once_when_back(
    database: Database, tmp_path: Path
) -> None:
    channel_id, conversation = _setup(database)
    channel = MemoryChannel()
    channel.down = True
    relay = _relay(database, channel_id, channel, tmp_path)
    sent = [_say(database, conversation, f"message {n}") for n in range(5)]
    for _ in range(3):  # attempts while it is down
        asyncio.run(relay.run_once())
        _make_due(database)
    with database.read() as session:
        assert delivery_counts(session, [channel_id])[channel_id] == {"pending": 5}
    channel.down = False
    asyncio.run(relay.run_once())
    assert [o.message_id for o in channel.shown] == sent
    # Only the thread's first message was tried while it was down (nothing overtakes it), and
    # each of its retries (attempts 2-4) first asked whether an earlier attempt had landed.
    assert channel.checks == 3
    with database.read() as session:
        assert delivery_counts(session, [channel_id])[channel_id] == {"sent": 5}


def test_rate_limits_wait_as_told_and_a_permanent_refusal_fails_the_delivery(
    database: Database, tmp_path: Path
) -> None:
    channel_id, conversation = _setup(database)
    channel = MemoryChannel()
    channel.rate_limited = 1
    relay = _relay(database, channel_id, channel, tmp_path)
    limited = _say(database, conversation, "limited")
    asyncio.run(relay.run_once())
    assert channel.shown == []
    asyncio.run(relay.run_once())  # retry_after 0: due at once
    assert [o.message_id for o in channel.shown] == [limited]
    channel.refuse = True
    refused = _say(database, conversation, "refused")
    asyncio.run(relay.run_once())
    _make_due(database)
    asyncio.run(relay.run_once())
    with database.read() as session:
        [(_, state, attempts, _)] = deliveries_of(session, refused)
    assert (state, attempts) == ("failed", 1)


def test_an_attempt_that_died_after_sending_is_not_sent_again(
    database: Database, tmp_path: Path
) -> None:
    channel_id, conversation = _setup(database)
    channel = MemoryChannel()
    message = _say(database, conversation, "exactly once")
    # A relay claims it and sends, then dies before recording (its claim lapses).
    with database.write() as session:
        plan_deliveries(session)
    with database.write() as session:
        [due] = claim_due(session, [channel_id], lease_s=0.0)
    asyncio.run(channel.deliver(Outbound(due.message_id, conversation, "exactly once", "", {}, {})))
    relay = _relay(database, channel_id, channel, tmp_path)
    asyncio.run(relay.run_once())
    assert len(channel.shown) == 1 and channel.checks == 1
    with database.read() as session:
        assert deliveries_of(session, message) == [(channel_id, "sent", 2, f"ext-{message}")]


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(n, 10) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


def test_two_relays_claiming_at_once_never_split_a_thread(
    database: Database, tmp_path: Path
) -> None:
    channel_id, conversation = _setup(database)
    for n in range(3):
        _say(database, conversation, f"message {n}")
    with database.write() as session:
        plan_deliveries(session)
    if not database.is_postgres:  # SQLite runs one writer at a time: nothing to race
        with database.write() as session:
            assert len(claim_due(session, [channel_id], lease_s=60)) == 3
        return
    # The first relay's claim is still uncommitted when the second one claims.
    with database.write() as first:
        taken = claim_due(first, [channel_id], lease_s=60)
        with database.write() as second:
            assert claim_due(second, [channel_id], lease_s=60) == []
    assert [d.body for d in taken] == ["message 0", "message 1", "message 2"]
    with database.write() as later:  # after it committed: the thread is in its hands
        assert claim_due(later, [channel_id], lease_s=60) == []
