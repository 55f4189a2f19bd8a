"""Redoable writes (Database.write(redoable=True)): on PostgreSQL that one transaction commits
without waiting for the WAL flush, and nothing else does; and the tool-call step records a
call of a tool with an effect durably (its start must exist before the effect may happen),
while the records of a call of a tool that is safe to repeat are redoable."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from nightowl.engine.preemption import RunningTurns
from nightowl.engine.tool_calls import run_tool_call
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.guard import GuardLimits
from nightowl.metrics import Metrics
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.tables import User
from nightowl.store.transcript import load_turn_entries
from nightowl.store.users import create_user
from nightowl.tools.providers import Toolbox
from nightowl.tools.registry import Tool, ToolContext, ToolRegistry, ToolResult


def _commit_flushes(session: Session) -> str:
    return str(session.execute(text("SHOW synchronous_commit")).scalar())


def test_only_a_redoable_write_commits_without_the_flush(database: Database) -> None:
    with database.write(redoable=True) as session:
        create_user(session, "redone")
        relaxed = _commit_flushes(session) if database.is_postgres else None
    with database.write() as session:  # the same pooled connection, the setting gone
        create_user(session, "durable")
        strict = _commit_flushes(session) if database.is_postgres else None
    with database.read() as session:
        names = set(session.scalars(select(User.name)))
    assert {"redone", "durable"} <= names  # both committed
    if database.is_postgres:
        assert (relaxed, strict) == ("off", "on")


async def _no_timer(*_: Any) -> None:
    return None


async def _answer(_arguments: Any, _ctx: ToolContext) -> ToolResult:
    return ToolResult("done", meta={"trust": "agent"})


def test_a_tool_with_an_effect_is_recorded_durably(database: Database, tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {}}
    tools = ToolRegistry(
        [
            Tool("look", "Looks.", "read", schema, _answer),
            Tool("post", "Posts.", "write", schema, _answer),
            Tool("mark", "Marks, keyed by the call.", "write", schema, _answer, idempotent=True),
        ]
    )
    deps = TurnDeps(
        database=database,
        metrics=Metrics(),
        model=None,
        tools=Toolbox(tools),
        limits=GuardLimits(),
        blob_dir=tmp_path / "blobs",
        schedule_timer=_no_timer,
        running=RunningTurns(),
        homes_dir=tmp_path / "homes",
    )
    with database.write() as session:
        owner = create_user(session, "owner").id
        conversation = create_conversation(session, owner).id
    seen: list[bool] = []
    plain_write = database.write

    @contextmanager
    def write(*, redoable: bool = False) -> Iterator[Session]:
        seen.append(redoable)
        with plain_write(redoable=redoable) as session:
            yield session

    database.write = write  # type: ignore[method-assign]
    try:
        for slot, name in enumerate(["look", "post", "mark", "nosuch"]):
            call = {"id": f"c{slot}", "name": name, "arguments": {}}
            asyncio.run(run_tool_call(deps, tools, "turn", conversation, owner, f"{slot}.0", call))
    finally:
        database.write = plain_write  # type: ignore[method-assign]
    # Two transactions per call (before and after the tool runs): only the effect's are
    # durable; an unknown tool only says so.
    assert seen == [True, True, False, False, True, True, True, True]
    with database.read() as session:
        results = [entry.text for entry in load_turn_entries(session, "turn")]
    assert results[:3] == ["done", "done", "done"] and "nosuch" in results[3]
