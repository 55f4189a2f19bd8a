"""Migration 0019 on SQLite and PostgreSQL: memory written before it gets the trust its
conversation suggests (when in doubt, untrusted), so an old webhook's "Asked: …" entry is fenced
from the first prompt after the upgrade."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from nightowl.store.database import Database
from nightowl.store.migrate import upgrade

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _insert(db: Database, table: str, **values: Any) -> None:
    columns = ", ".join(values)
    json_cast = db.engine.dialect.name == "postgresql"
    params = ", ".join(
        f"CAST(:{k} AS JSON)" if json_cast and k == "payload" else f":{k}" for k in values
    )
    with db.engine.begin() as connection:
        connection.execute(text(f"INSERT INTO {table} ({columns}) VALUES ({params})"), values)


def _conversation(db: Database, conversation: str, trust: str) -> None:
    _insert(
        db,
        "conversations",
        id=conversation,
        owner_id="u1",
        kind="direct",
        channel="web",
        title="",
        last_seq=1,
        created_at=NOW,
        updated_at=NOW,
    )
    _insert(
        db,
        "messages",
        id=f"m-{conversation}",
        conversation_id=conversation,
        seq=1,
        role="user",
        body="hello",
        trust=trust,
        created_at=NOW,
    )


@pytest.mark.empty_database
def test_existing_memory_takes_the_trust_of_its_conversation(database_url: str) -> None:
    db = Database(database_url)
    upgrade(db, "0014")
    _insert(db, "users", id="u1", name="owner", role="owner", created_at=NOW)
    _conversation(db, "c-owner", "owner")
    _conversation(db, "c-hook", "untrusted")  # a webhook's conversation
    _conversation(db, "c-page", "owner")  # the owner's, but it read a web page
    page = {"kind": "tool_result", "text": "<html>", "trust": "untrusted", "meta": {}}
    _insert(
        db,
        "transcript_entries",
        conversation_id="c-page",
        turn_id="t",
        entry_key="t:tool:0.0",
        payload=json.dumps(page),
        created_at=NOW,
    )
    for conversation in ("c-owner", "c-hook", "c-page"):
        _insert(
            db,
            "memory_log",
            id=f"log-{conversation}",
            user_id="u1",
            conversation_id=conversation,
            summary="Asked: …",
            created_at=NOW,
            use_count=0,
        )
        _insert(
            db,
            "memory_notes",
            id=f"note-{conversation}",
            user_id="u1",
            conversation_id=conversation,
            text="a note",
            created_at=NOW,
            expires_at=NOW,
        )
        _insert(
            db,
            "routines",
            id=f"rtn-{conversation}",
            owner_id="u1",
            conversation_id=conversation,
            name="r",
            prompt="p",
            cron="0 8 * * *",
            timezone="UTC",
            status="active",
            created_by="agent",
            created_at=NOW,
        )
    for name, by, approved in (
        ("mine", "owner", True),
        ("seen", "agent", True),
        ("new", "agent", False),
    ):
        _insert(
            db,
            "memory_skills",
            id=f"skill-{name}",
            user_id="u1",
            name=name,
            description="d",
            body="b",
            created_by=by,
            approved=approved,
            created_at=NOW,
            updated_at=NOW,
        )
    upgrade(db)
    with db.engine.connect() as connection:

        def trust(table: str) -> dict[str, str]:
            found = connection.execute(text(f"SELECT id, trust FROM {table}"))
            return {str(row[0]).split("-", 1)[1]: str(row[1]) for row in found}

        expected = {"c-owner": "owner", "c-hook": "untrusted", "c-page": "untrusted"}
        assert trust("memory_log") == expected
        assert trust("memory_notes") == {**expected, "c-owner": "agent"}
        assert trust("routines") == expected
        assert trust("memory_skills") == {"mine": "owner", "seen": "agent", "new": "untrusted"}
    db.dispose()
