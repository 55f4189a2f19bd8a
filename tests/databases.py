"""Real databases for tests: a SQLite file, or a new database on the local PostgreSQL.

A new database is empty, or (`migrated=True`) already at the newest migration, copied from
a template this test process migrates once: the SQLite file is copied; on PostgreSQL the
copy is `CREATE DATABASE … TEMPLATE …` and holds DBOS's system tables too. Migrating each
test's database took 1-4 s of a test (48 Alembic migrations, and DBOS's own on
PostgreSQL); a copy takes about 0.1 s. A server started on a copy still runs its migration
check, finds the store at the newest revision and goes on, as a restart does; tests of the
migrations themselves, and the API tests' servers, start from an empty database.

A PostgreSQL database is dropped after its test by a thread of this test process: dropping
a filled one took 1-2 s, which the next test no longer waits for. The test process waits
for the drops (and drops its template) when its session ends.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.e2e.store_view import forget

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("sqlite", "postgresql")

log = logging.getLogger(__name__)


def postgres_url(name: str) -> str:
    """The SQLAlchemy URL of database `name` on the local PostgreSQL."""
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def _admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(sql)


def _migrate(url: str) -> None:
    from nightowl.store.database import Database
    from nightowl.store.migrate import upgrade

    database = Database(url)
    try:
        upgrade(database)
    finally:
        database.dispose()


class _Templates:
    """This test process's migrated databases, made at first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sqlite: Path | None = None
        self._postgres: str | None = None

    def sqlite(self) -> Path:
        """A folder with a migrated app store (nightowl.db) and DBOS history (durable.sqlite)."""
        with self._lock:
            if self._sqlite is None:
                from dbos import DBOS

                folder = Path(tempfile.mkdtemp(prefix="nightowl-template-"))
                _migrate(f"sqlite:///{folder / 'nightowl.db'}")
                DBOS.migrate(f"sqlite:///{folder / 'durable.sqlite'}")
                self._sqlite = folder
            return self._sqlite

    def postgres(self) -> str:
        with self._lock:
            if self._postgres is None:
                from dbos import DBOS

                name = f"nw_template_{os.getpid()}_{secrets.token_hex(3)}"
                _admin(f"CREATE DATABASE {name}")
                _migrate(postgres_url(name))
                DBOS.migrate(postgres_url(name))  # the schema a server's DBOS launch makes
                # Nobody connects while it is copied (a copy fails while anyone is).
                _admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
                self._postgres = name
            return self._postgres

    def remove(self) -> None:
        with self._lock:
            if self._sqlite is not None:
                shutil.rmtree(self._sqlite, ignore_errors=True)
                self._sqlite = None
            if self._postgres is not None:
                _admin(f"DROP DATABASE IF EXISTS {self._postgres}")
                self._postgres = None


class _Drops:
    """Drops PostgreSQL databases on a thread of its own, those queued meanwhile together:
    each DROP DATABASE waits for a checkpoint, which drops running side by side share (four
    took 15 s one after another, 2 s side by side)."""

    def __init__(self) -> None:
        self._names: queue.Queue[str] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def later(self, name: str) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="drop-db", daemon=True)
                self._thread.start()
        self._names.put(name)

    def wait(self) -> None:
        self._names.join()

    def _run(self) -> None:
        while True:
            batch = [self._names.get()]
            while not self._names.empty():
                batch.append(self._names.get())
            threads = [threading.Thread(target=_drop, args=(name,)) for name in batch]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for _ in batch:
                self._names.task_done()


def _drop(name: str) -> None:
    for attempt in range(5):  # a test may be restarting PostgreSQL
        try:
            _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            return
        except psycopg.OperationalError:
            time.sleep(1 + attempt)
    log.warning("could not drop test database %s", name)


_templates = _Templates()
_drops = _Drops()


def finish() -> None:
    """Wait for the pending drops and remove this process's templates (at the session's
    end; again at exit, harmlessly)."""
    _drops.wait()
    _templates.remove()


atexit.register(finish)


def seed_data_dir(data_dir: Path) -> None:
    """Put a migrated SQLite app store and DBOS history into a new server's data dir (copies
    of this process's template): its first start finds them at the newest migration."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for name in ("nightowl.db", "durable.sqlite"):
        shutil.copyfile(_templates.sqlite() / name, data_dir / name)


def needs_empty_database(request: pytest.FixtureRequest) -> bool:
    """Whether the test is marked `empty_database` (it tests the migrations themselves)."""
    return request.node.get_closest_marker("empty_database") is not None


@contextmanager
def fresh_database(backend: str, folder: Path, *, migrated: bool = False) -> Iterator[str]:
    """A SQLAlchemy URL of a new database, dropped afterwards: empty, or at the newest
    migration (`migrated`)."""
    if backend == "sqlite":
        path = folder / "nightowl.db"
        if migrated:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_templates.sqlite() / "nightowl.db", path)
        yield f"sqlite:///{path}"
        return
    name = f"nw_test_{secrets.token_hex(6)}"
    template = f" TEMPLATE {_templates.postgres()}" if migrated else ""
    _admin(f"CREATE DATABASE {name}{template}")
    try:
        yield postgres_url(name)
    finally:
        forget(postgres_url(name))
        _drops.later(name)
