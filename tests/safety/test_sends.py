"""Sends through the outbox: intent first, the key passed on, a crash checked, never repeated."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from nightowl.safety.sends import SendProvider, perform_send
from nightowl.store.database import Database
from nightowl.store.tables import SendRecord
from tests.safety.send_provider import FakeSendProvider

PAYLOAD = {"to": "dana@acme.example", "subject": "Lunch", "text": "Thursday?"}


def _send(database: Database, provider: SendProvider, key: str) -> str | None:
    outcome = asyncio.run(
        perform_send(
            database,
            provider,
            key,
            owner_id="o",
            conversation_id="c",
            turn_id="t",
            tool="send_message",
            payload=PAYLOAD,
        )
    )
    return outcome.provider_id


def test_a_send_happens_once_per_key_with_the_key_passed_on(database: Database) -> None:
    with FakeSendProvider() as fake:
        provider = SendProvider(fake.url)
        assert _send(database, provider, "t:0.0") == "snd-1"
        assert _send(database, provider, "t:0.0") == "snd-1"  # a replayed step
        assert [p["key"] for p in fake.posts] == ["t:0.0"]
        assert fake.posts[0]["body"] == PAYLOAD
    with database.read() as session:
        row = session.scalars(select(SendRecord)).one()
        assert (row.status, row.provider_id) == ("sent", "snd-1")


def test_an_intent_left_by_a_crash_is_checked_with_the_provider_first(database: Database) -> None:
    with FakeSendProvider() as fake:
        provider = SendProvider(fake.url)
        # The provider got the send, then the process died before recording it.
        with database.write() as session:
            session.add(
                SendRecord(
                    idempotency_key="t:1.0",
                    owner_id="o",
                    conversation_id="c",
                    turn_id="t",
                    tool="send_message",
                    payload=PAYLOAD,
                    status="intent",
                )
            )
        fake.posts.append({"key": "t:1.0", "body": PAYLOAD})
        assert _send(database, provider, "t:1.0") == "snd-1"
        assert len(fake.posts) == 1 and fake.lookups == ["t:1.0"]
        # Died before the provider got it: checked, then sent.
        with database.write() as session:
            session.add(
                SendRecord(
                    idempotency_key="t:2.0",
                    owner_id="o",
                    conversation_id="c",
                    turn_id="t",
                    tool="send_message",
                    payload=PAYLOAD,
                    status="intent",
                )
            )
        assert _send(database, provider, "t:2.0") == "snd-2"
        assert [p["key"] for p in fake.posts] == ["t:1.0", "t:2.0"]


def test_an_unreachable_provider_is_recorded_as_failed(database: Database) -> None:
    provider = SendProvider("http://127.0.0.1:9", timeout_s=2)
    assert _send(database, provider, "t:3.0") is None
    with database.read() as session:
        row = session.scalars(select(SendRecord)).one()
        assert row.status == "failed" and "could not be reached" in (row.error or "")
