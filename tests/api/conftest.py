"""A real server process per database backend, shared by the API tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import BACKENDS, fresh_database, needs_empty_database
from tests.server import ServerProcess


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A running server with no model (turns record their batch), on each backend: on a
    migrated copy of a database, or an empty one in a module marked `empty_database`."""
    folder: Path = tmp_path_factory.mktemp(f"api-{request.param}")
    migrated = not needs_empty_database(request)
    with fresh_database(request.param, folder, migrated=migrated) as url:
        process = ServerProcess(folder, url).start()
        try:
            yield process
        finally:
            process.stop()
