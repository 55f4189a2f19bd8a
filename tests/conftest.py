"""Shared fixtures: real databases on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from tests.databases import BACKENDS, fresh_database


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database URL, once per backend."""
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    """A migrated app store, once per backend."""
    db = Database(database_url)
    upgrade(db)
    yield db
    db.dispose()
