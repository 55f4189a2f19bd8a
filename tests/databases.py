"""Real databases for tests: a SQLite file, or a fresh database on the local PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.e2e.store_view import forget

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("sqlite", "postgresql")


@contextmanager
def fresh_database(backend: str, folder: Path) -> Iterator[str]:
    """A SQLAlchemy URL of an empty database, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'nightowl.db'}"
        return
    name = f"nw_test_{secrets.token_hex(6)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        forget(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}")
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
