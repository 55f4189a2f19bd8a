"""Waiting out a database outage (store/outages.py) against a real PostgreSQL made unreachable
for the code under test only: through a proxy the test cuts and restores, or by terminating
the code's own backend. A transaction or step cut off runs again and commits once; any other
error is not retried."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import func, select, text

from nightowl.store.conversations import append_message, create_conversation
from nightowl.store.database import Database
from nightowl.store.errors import Invalid
from nightowl.store.migrate import upgrade
from nightowl.store.outages import outlast, through_outages, waits_out_outages
from nightowl.store.outbox import deliver_to_user
from nightowl.store.tables import Message
from nightowl.store.users import ensure_owner
from tests.databases import PG_ADMIN, fresh_database
from tests.pg_proxy import PostgresProxy, postgres_proxy, restore_after

OUTAGE_S = 1.5


@pytest.fixture
def direct_url(tmp_path: Path) -> Iterator[str]:
    """A migrated PostgreSQL database of this test's own."""
    with fresh_database("postgresql", tmp_path) as url:
        database = Database(url)
        upgrade(database)
        database.dispose()
        yield url


@pytest.fixture
def proxy() -> Iterator[PostgresProxy]:
    with postgres_proxy() as running:
        yield running


def _conversation(url: str) -> str:
    database = Database(url)
    try:
        with database.write() as session:
            owner = ensure_owner(session)
            return create_conversation(session, owner.id).id
    finally:
        database.dispose()


def _messages(url: str, conversation: str) -> list[str]:
    database = Database(url)
    try:
        with database.read() as session:
            return list(
                session.scalars(
                    select(Message.body)
                    .where(Message.conversation_id == conversation)
                    .order_by(Message.seq)
                )
            )
    finally:
        database.dispose()


def test_a_transaction_waits_for_the_database_and_commits_once(
    direct_url: str, proxy: PostgresProxy
) -> None:
    conversation = _conversation(direct_url)
    database = Database(proxy.url(direct_url))
    tries = 0

    def write() -> None:
        nonlocal tries
        tries += 1
        with database.write() as session:
            append_message(session, conversation, role="agent", body="kept", trust="agent")

    try:
        through_outages(write)  # a pooled connection to lose
        proxy.cut()
        restore_after(proxy, OUTAGE_S)
        started = time.monotonic()
        asyncio.run(outlast(write))
        waited = time.monotonic() - started
    finally:
        database.dispose()
    assert waited >= OUTAGE_S - 0.1  # it could only commit once the database was back
    assert tries >= 3  # tried while it was away, and did not give up
    assert _messages(direct_url, conversation) == ["kept", "kept"]  # once per call


def test_a_step_cut_off_midway_runs_again_whole(direct_url: str, proxy: PostgresProxy) -> None:
    """The outage begins inside the step, between two transactions: the step runs again from
    the top, and its keyed first write is not doubled."""
    conversation = _conversation(direct_url)
    database = Database(proxy.url(direct_url))
    runs = 0

    @waits_out_outages
    async def step(note: str) -> int:
        nonlocal runs
        runs += 1

        def first() -> None:
            with database.write() as session:
                deliver_to_user(session, conversation, key="first", body=note, turn_id=None)

        def second() -> int:
            with database.write() as session:
                return append_message(
                    session, conversation, role="agent", body="second", trust="agent"
                ).seq

        await asyncio.to_thread(first)
        if runs == 1:
            proxy.cut()
            restore_after(proxy, OUTAGE_S)
        return await asyncio.to_thread(second)

    try:
        seq = asyncio.run(step("first"))
    finally:
        database.dispose()
    assert runs >= 2  # cut off, then again (while away, and once back)
    assert _messages(direct_url, conversation) == ["first", "second"]
    assert seq == 2


def test_other_errors_are_not_waited_on(direct_url: str) -> None:
    database = Database(direct_url)
    runs = 0

    @waits_out_outages
    async def step() -> None:
        nonlocal runs
        runs += 1
        with database.write() as session:
            create_conversation(session, ensure_owner(session).id, kind="nonsense")

    try:
        with pytest.raises(Invalid):
            asyncio.run(step())
    finally:
        database.dispose()
    assert runs == 1


def test_a_backend_terminated_mid_transaction_is_waited_out(direct_url: str) -> None:
    """`pg_terminate_backend` (what a failover or an administrator does) cuts this test's own
    connection inside its transaction: the transaction rolled back and runs again."""
    conversation = _conversation(direct_url)
    database = Database(direct_url)
    tries = 0

    def write() -> None:
        nonlocal tries
        tries += 1
        with database.write() as session:
            append_message(session, conversation, role="agent", body="kept", trust="agent")
            if tries == 1:
                pid = session.scalar(text("SELECT pg_backend_pid()"))
                with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                session.execute(select(func.count()).select_from(Message))

    try:
        through_outages(write)
    finally:
        database.dispose()
    assert tries == 2
    assert _messages(direct_url, conversation) == ["kept"]
