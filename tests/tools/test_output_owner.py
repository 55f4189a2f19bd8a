"""`read_output` reads back only what was shown to the caller's own agent: blobs are stored by
content, so another user's output must stay out of reach (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nightowl.store.blobs import put_text
from nightowl.store.database import Database
from nightowl.store.output_blobs import record_output_blob
from nightowl.store.users import create_user, ensure_owner
from nightowl.tools.outputs import READ_OUTPUT, ReadOutputArgs
from nightowl.tools.registry import ToolContext


def shown_to_agent(database: Database, owner_id: str, blob_dir: Path, text: str) -> str:
    """Store `text` as a large output of one of `owner_id`'s tool calls (as the tool-call
    step does)."""
    reference = put_text(blob_dir, text)
    with database.write() as session:
        record_output_blob(session, owner_id, reference, "untrusted")
    return reference


def context_of(database: Database, owner_id: str, tmp_path: Path) -> ToolContext:
    return ToolContext(
        database=database,
        blob_dir=tmp_path / "blobs",
        conversation_id="c",
        owner_id=owner_id,
        turn_id="t",
        call_id="0.0",
        home=tmp_path / "home",
    )


def test_another_users_output_cannot_be_read_back(database: Database, tmp_path: Path) -> None:
    with database.write() as session:
        owner = ensure_owner(session).id
        member = create_user(session, "dana").id
    reference = shown_to_agent(database, owner, tmp_path / "blobs", "the owner's bank statement")
    mine = asyncio.run(
        READ_OUTPUT.run(ReadOutputArgs(reference=reference), context_of(database, owner, tmp_path))
    )
    assert not mine.is_error and "bank statement" in mine.content
    theirs = asyncio.run(
        READ_OUTPUT.run(ReadOutputArgs(reference=reference), context_of(database, member, tmp_path))
    )
    assert theirs.is_error and "bank statement" not in theirs.content
    assert "of yours" in theirs.content
