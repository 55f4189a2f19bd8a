"""Real sandboxes for tests: a migrated SQLite store and a Computers object over a tmp dir."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nightowl.computer.computers import Computers, ComputerSettings
from nightowl.computer.sandbox import Network
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.users import create_user

# Far from the server's default range, and apart per test process.
UID_BASE = 3_800_000 + (os.getpid() % 1000) * 100


@contextmanager
def computers_for(
    tmp_path: Path,
    network: Network = "none",
    memory_mb: int = 512,
    pids: int = 128,
    database: Database | None = None,
) -> Iterator[Computers]:
    """A Computers object with its own store, homes and snapshots; every sandbox stopped after."""
    own = database is None
    if database is None:
        database = Database(f"sqlite:///{tmp_path / 'store.db'}")
        upgrade(database)
    settings = ComputerSettings(
        homes_dir=tmp_path / "homes",
        snapshot_dir=tmp_path / "blobs",
        network=network,
        memory_bytes=memory_mb * 1024 * 1024,
        pids=pids,
        uid_base=UID_BASE,
        idle_sleep_s=3600,
    )
    computers = Computers(settings, database)
    try:
        yield computers
    finally:
        computers.close()
        if own:
            database.dispose()


def new_user(database: Database, name: str) -> str:
    """A user id in the store (sandboxes belong to users)."""
    with database.write() as session:
        return create_user(session, name).id
