"""Usage and cost totals per day, conversation and routine; spending against budgets; on
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import Session

from nightowl.store.conversations import append_message, create_conversation
from nightowl.store.database import Database
from nightowl.store.ids import new_id
from nightowl.store.routines import create_routine
from nightowl.store.tables import Trigger, utcnow
from nightowl.store.transcript import finish_model_call, start_model_call
from nightowl.store.turns import claim_batch, note_routine, queue_turn
from nightowl.store.usage import spending_today, spent_since, usage_report
from nightowl.store.users import ensure_owner


def _call(
    session: Session, conversation: str, turn: str, usage: dict[str, int], cost: float | None
) -> None:
    record = start_model_call(session, conversation, turn, 0, "scripted:x")
    finish_model_call(session, record, usage, cost_usd=cost)


def test_usage_report_and_spending(database: Database) -> None:
    midnight = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    with database.write() as session:
        owner = ensure_owner(session).id
        digest = create_conversation(session, owner, kind="direct", title="Morning digest")
        chat = create_conversation(session, owner, kind="direct", title="Chat")
        routine = create_routine(
            session,
            owner,
            digest.id,
            name="digest",
            prompt="summarise",
            cron="0 8 * * *",
            timezone="UTC",
            created_by="owner",
        )
        fired = append_message(session, digest.id, role="user", body="Routine fired", trust="owner")
        session.add(
            Trigger(
                id=new_id("trg"),
                source="routine",
                idempotency_key=f"{routine.id}:2026-11-29T08:00:00+00:00",
                conversation_id=digest.id,
                message_id=fired.id,
            )
        )
        turn, _ = queue_turn(session, digest.id, 3)
        batch = claim_batch(session, turn.id)
        assert note_routine(session, turn.id, [m.id for m in batch]) == routine.id
        _call(session, digest.id, turn.id, {"input_tokens": 800, "cache_read_tokens": 200}, 0.9)
        _call(session, digest.id, turn.id, {"input_tokens": 100, "output_tokens": 50}, 0.1)

        append_message(session, chat.id, role="user", body="hi", trust="owner")
        other, _ = queue_turn(session, chat.id, 0)
        claim_batch(session, other.id)
        assert note_routine(session, other.id, []) is None
        _call(session, chat.id, other.id, {"input_tokens": 300, "cache_write_tokens": 100}, None)

    with database.read() as session:
        report = usage_report(session, owner, midnight)
        routine_spent = spent_since(session, midnight, routine_id=routine.id)
        chat_spent = spent_since(session, midnight, conversation_id=chat.id)
        today = spending_today(session, turn.id, midnight)
        tomorrow = usage_report(session, owner, midnight + timedelta(days=1))

    total = report["total"]
    assert total["calls"] == 3 and total["unpriced_calls"] == 1
    assert total["input_tokens"] == 1200 and total["cache_read_tokens"] == 200
    assert total["cache_write_tokens"] == 100 and total["output_tokens"] == 50
    assert total["cost_usd"] == pytest.approx(1.0)
    assert total["cached_share"] == pytest.approx(200 / 1500, abs=1e-4)
    assert [d["calls"] for d in report["by_day"]] == [3]
    by_conversation = {row["title"]: row for row in report["by_conversation"]}
    assert by_conversation["Morning digest"]["cost_usd"] == pytest.approx(1.0)
    assert by_conversation["Chat"]["unpriced_calls"] == 1
    assert [(r["name"], r["calls"]) for r in report["by_routine"]] == [("digest", 2)]
    assert report["by_routine"][0]["cost_usd"] == pytest.approx(1.0)
    assert routine_spent == pytest.approx(1.0) and chat_spent == 0.0
    assert today.routine_name == "digest" and today.routine_usd == pytest.approx(1.0)
    assert today.conversation_usd == pytest.approx(1.0) and today.tokens == 1150
    assert tomorrow["total"]["calls"] == 0 and tomorrow["by_day"] == []
