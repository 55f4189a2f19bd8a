"""Engines and transactions for the app store, on SQLite (embedded) or PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Session, sessionmaker


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    """A SQLite engine in WAL mode; `immediate` engines take the write lock at BEGIN."""
    path = url.removeprefix("sqlite:///")
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30},
        pool_size=8,
        max_overflow=16,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # A writer takes the lock up front, so read-then-write never deadlocks on upgrade.
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


# One transaction's commit returns before its WAL is flushed (Database.write(redoable=True)).
_COMMIT_WITHOUT_FLUSH = "SET LOCAL synchronous_commit TO OFF"


class Database:
    """The app store's engines and session factories; `write()` and `read()` are transactions."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.is_postgres = url.startswith("postgresql")
        if self.is_postgres:
            # pre_ping: after a PostgreSQL restart, a pooled connection is tested (one round
            # trip) and replaced instead of failing the request that took it.
            self.engine = create_engine(
                url, pool_size=10, max_overflow=20, pool_recycle=1800, pool_pre_ping=True
            )
            self.read_engine = self.engine
        else:
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        self.write_sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._reader = sessionmaker(self.read_engine, expire_on_commit=False)
        # SQLite has one writer at a time. Threads of this process queue on a lock, handed
        # over the moment the writer commits; left to SQLite, a waiting writer sleeps in its
        # busy handler (1, 2, 5, 10 … ms) whatever the lock does, and under a burst most of
        # the time goes to sleeping. Other processes still wait through the busy timeout.
        self._writer: threading.Lock | nullcontext[None] = (
            nullcontext() if self.is_postgres else threading.Lock()
        )

    @contextmanager
    def write(self, *, redoable: bool = False) -> Iterator[Session]:
        """A read-write transaction, committed when the block ends without an exception.

        `redoable`: the transaction records only what is done again if the record is lost (a
        model's reply, the result of a tool that is safe to repeat: the step runs again, as
        after a worker crash before the commit). On PostgreSQL its commit does not wait for
        the WAL to reach the disk (`synchronous_commit` off for it alone): a database crash
        may lose it, but only together with everything committed after it, since the next
        synchronous commit of the cluster — any effect's record, DBOS's own — flushes the WAL
        up to itself. SQLite (WAL mode, synchronous=NORMAL) commits every transaction so.
        Never use it for a record that must exist before an effect (a tool run's start).

        Never open one inside another on the same thread (it would wait for itself).
        """
        with self._writer, self.write_sessions() as session, session.begin():
            if redoable and self.is_postgres:
                session.connection().exec_driver_sql(_COMMIT_WITHOUT_FLUSH)
            yield session

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only transaction (never takes SQLite's write lock)."""
        with self._reader() as session, session.begin():
            yield session

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()


def ping(session: Session) -> None:
    """One trivial query: the database answers (raises what the driver raises otherwise)."""
    session.execute(text("SELECT 1"))


def ping_url(url: str) -> None:
    """Connect to the database at `url` once and ask it a trivial query (DBOS's system
    database, which has no `Database` of ours); raises what the driver raises."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        engine.dispose()
