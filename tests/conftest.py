"""Shared fixtures: real databases on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from tests.databases import BACKENDS, finish, fresh_database, needs_empty_database

# The suite runs 4 test processes on 2 cores. llama.cpp's threads wait for each other
# spinning: with other processes on the cores, two threads took 9 times the CPU of one for the
# same two replies (162-167 s against 17-19 s, and 235-242 s against 22-32 s of wall time,
# measured during a full run). Every server, CLI call and model the tests start inherits this.
os.environ.setdefault("NIGHTOWL_LOCAL_MODEL_THREADS", "1")


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new database URL, once per backend: at the newest migration (a copy of a template,
    tests/databases.py), or empty for a test marked `empty_database`."""
    migrated = not needs_empty_database(request)
    with fresh_database(request.param, tmp_path, migrated=migrated) as url:
        yield url


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    """A migrated app store, once per backend."""
    db = Database(database_url)
    upgrade(db)
    yield db
    db.dispose()


def pytest_sessionfinish() -> None:
    """The test databases' pending drops finish before the test process ends."""
    finish()


# Tests that add test hosts in network namespaces route the same addresses (169.254.169.254,
# 100.64.x, ...) in the host's namespace: run them in one test process, one at a time.
NETNS_MODULES = ("test_web_fetch.py", "test_isolation.py", "test_gvisor.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests that must not run side by side (`make test` runs with xdist)."""
    for item in items:
        if item.path.name in NETNS_MODULES:
            item.add_marker(pytest.mark.xdist_group("netns"))


@pytest.fixture(autouse=True)
def _no_event_loop_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Outside tests/web, no event loop is marked running in this thread: the web tests'
    session-wide Playwright (its sync API) leaves its loop marked running between tests, and a
    later test of the same test process that calls asyncio.run() then failed ("cannot be
    called from a running event loop"). The loop is put back for the web tests after."""
    left = asyncio.events._get_running_loop()
    if left is None or "web" in request.path.parts:
        yield
        return
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(left)


@pytest.fixture(autouse=True)
def _host_dev_null_survives(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test after which the host's /dev/null is no longer the null device (it was
    once replaced during a run, which breaks every shell on the machine)."""
    yield
    if not stat.S_ISCHR(os.stat("/dev/null").st_mode):
        raise AssertionError(f"{request.node.nodeid} replaced the host's /dev/null")
