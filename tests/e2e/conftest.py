"""Helpers for end-to-end tests that read the store the server writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import BACKENDS, fresh_database


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database for a server process, once per backend."""
    with fresh_database(request.param, tmp_path) as url:
        yield url
