"""Copies of the two stores: the app store and DBOS's durable history.

On SQLite they are two files, copied with SQLite's online backup API (a consistent copy while
a server writes). On PostgreSQL both live in one database (the app tables and the `dbos`
schema): one `pg_dump` in its custom format holds them, and `pg_restore` puts it back. The
client programs must be installed beside the server, of the server's major version or newer.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import psycopg
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from nightowl.backup.manifest import BackupError
from nightowl.config import Settings
from nightowl.store.computers import snapshot_references

PG_DUMP_NAME = "nightowl.pgdump"


def sqlite_files(settings: Settings) -> dict[str, Path]:
    """The SQLite stores by the name their copy has in an archive."""
    return {
        "nightowl.db": Path(make_url(settings.store_url).database or ""),
        "durable.sqlite": Path(make_url(settings.system_database_url).database or ""),
    }


def copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (its WAL folded in)."""
    if not source.is_file():
        raise BackupError(
            f"{source} does not exist: are NIGHTOWL_DATA_DIR and NIGHTOWL_DATABASE_URL the "
            "server's?"
        )
    with (
        closing(sqlite3.connect(source, timeout=30)) as live,
        closing(sqlite3.connect(target)) as copy,
    ):
        live.backup(copy)


def sqlite_is_empty(settings: Settings) -> bool:
    """Whether neither SQLite store exists yet (or both are zero-length files)."""
    return all(
        not path.exists() or path.stat().st_size == 0 for path in sqlite_files(settings).values()
    )


def remove_sqlite(settings: Settings) -> None:
    """Delete both SQLite stores with their WAL and shared-memory files (restore --force)."""
    for path in sqlite_files(settings).values():
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URI for the client programs, and the environment carrying the password
    (kept off the command line, where `ps` would show it)."""
    parsed = make_url(url)
    env = dict(os.environ)
    if parsed.password:
        env["PGPASSWORD"] = str(parsed.password)
    plain = parsed.set(drivername="postgresql", password=None)
    return plain.render_as_string(hide_password=False), env


def _client(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise BackupError(
            f"{program} is not installed; install the PostgreSQL client programs of the "
            "server's major version (Debian: apt-get install postgresql-client)"
        )
    return found


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{what} failed: {done.stderr.strip()[-2000:]}")


def dump_postgres(url: str, target: Path, *, with_computers: bool) -> list[str]:
    """The whole database (app tables and the `dbos` schema) into one custom-format dump; the
    computers' snapshot references as the dump holds them (`with_computers`: the table exists).

    The references are read in the very snapshot pg_dump copies (exported by a transaction
    held open while it runs), so a computer that sleeps meanwhile cannot leave the dump
    referring to a snapshot the backup did not keep."""
    uri, env = _libpq(url)
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect().execution_options(isolation_level="REPEATABLE READ") as held:
            exported = held.execute(text("SELECT pg_export_snapshot()")).scalar_one()
            references: list[str] = []
            if with_computers:
                with Session(bind=held) as session:  # joins the held transaction
                    references = snapshot_references(session)
            command = [
                _client("pg_dump"),
                "--format=custom",
                f"--snapshot={exported}",
                f"--file={target}",
                f"--dbname={uri}",
            ]
            _run(command, env, "pg_dump")
    finally:
        engine.dispose()
    return references


def sqlite_snapshot_references(copy: Path) -> list[str]:
    """The computers' snapshot references in a copy of the SQLite app store."""
    engine = create_engine(f"sqlite:///{copy}", poolclass=NullPool)
    try:
        with Session(engine) as session:
            return snapshot_references(session)
    finally:
        engine.dispose()


def postgres_is_empty(url: str) -> bool:
    """Whether the database holds no table of nightowl's (app or `dbos` schema)."""
    uri, _env = _libpq(url)
    with psycopg.connect(uri, password=make_url(url).password) as connection:
        row = connection.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema IN ('public', 'dbos')"
        ).fetchone()
    return row is None or row[0] == 0


def clear_postgres(url: str) -> None:
    """Drop nightowl's schemas (restore --force): the dump brings them back whole."""
    uri, _env = _libpq(url)
    with psycopg.connect(uri, password=make_url(url).password, autocommit=True) as connection:
        connection.execute("DROP SCHEMA IF EXISTS dbos CASCADE")
        connection.execute("DROP SCHEMA IF EXISTS public CASCADE")
        connection.execute("CREATE SCHEMA public")


def restore_postgres(url: str, dump: Path) -> None:
    """Load a dump into an empty database, all or nothing (one transaction)."""
    uri, env = _libpq(url)
    command = [
        _client("pg_restore"),
        "--no-owner",
        "--no-privileges",
        "--exit-on-error",
        "--single-transaction",
        f"--dbname={uri}",
        str(dump),
    ]
    _run(
        command,
        env,
        "pg_restore (one transaction: the database was left without nightowl's tables)",
    )


def app_store_revision(settings: Settings) -> str | None:
    """The app store's migration (None when it has none yet)."""
    from nightowl.store.database import Database
    from nightowl.store.migrate import stored_revision

    database = Database(settings.store_url)
    try:
        return stored_revision(database)
    finally:
        database.dispose()
