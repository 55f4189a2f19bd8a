"""A real server process per database backend, shared by the API tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import BACKENDS, fresh_database
from tests.server import ServerProcess


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A running server with no model (turns record their batch), on each backend."""
    folder: Path = tmp_path_factory.mktemp(f"api-{request.param}")
    with fresh_database(request.param, folder) as url:
        process = ServerProcess(folder, url).start()
        try:
            yield process
        finally:
            process.stop()
