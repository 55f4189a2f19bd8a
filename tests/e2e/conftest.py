"""Helpers for end-to-end tests that read the store the server writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import BACKENDS, fresh_database, needs_empty_database


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new database for a server process, once per backend: at the newest migration, or
    empty for a test marked `empty_database` (tests/databases.py)."""
    migrated = not needs_empty_database(request)
    with fresh_database(request.param, tmp_path, migrated=migrated) as url:
        yield url
