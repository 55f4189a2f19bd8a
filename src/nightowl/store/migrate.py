"""Apply the app store's Alembic migrations (on every start) and report where it stands.

Revisions are named by their file's number (`versions/0037_....py` is revision "0037", whose
down revision is "0036"; tests/store/test_store.py holds every file to it), so a store
already at the newest revision is recognised with one query, without importing Alembic and
reading every migration file (0.3 s of a server's 2.3 s start on 2 cores).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from nightowl.store.database import Database

if TYPE_CHECKING:
    from alembic.config import Config

_MIGRATIONS = Path(__file__).parent / "migrations"
_log = logging.getLogger(__name__)


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def _revisions() -> list[str]:
    """Every migration's revision, oldest first."""
    return sorted(
        path.name.split("_", 1)[0] for path in (_MIGRATIONS / "versions").glob("[0-9]*_*.py")
    )


def newest_revision() -> str:
    """The newest migration's revision: its file's number."""
    return _revisions()[-1]


def stored_revision(database: Database) -> str | None:
    """The revision the store is at (None for a new store)."""
    with database.read_engine.connect() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(database: Database, revision: str = "head") -> None:
    """Bring the store's schema to the newest revision, or to `revision` (tests of a data
    migration); a no-op when it is there."""
    before = stored_revision(database)
    if revision == "head" and before == newest_revision():
        return
    from alembic import command

    config = _config()
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    after = stored_revision(database)
    steps = [r for r in _revisions() if (before is None or r > before) and after and r <= after]
    if steps:
        # The one line a migration leaves in the console (Alembic's own, a line per step,
        # are quieted in logs.py).
        _log.info(
            "migrated the database: %d step%s, now at %s",
            len(steps),
            "" if len(steps) == 1 else "s",
            after,
        )


def downgrade(database: Database, revision: str) -> None:
    """Take the store's schema back to `revision` (tests of a migration; an operator's way
    back before running older code)."""
    from alembic import command

    config = _config()
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def revision_status(database: Database) -> tuple[str | None, str]:
    """The store's current revision and the newest one this code knows."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    with database.read_engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current, str(head)


def make_revision(database: Database, message: str) -> None:
    """Autogenerate a new migration from the tables (a development aid)."""
    from alembic import command

    config = _config()
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.revision(config, message=message, autogenerate=True)
