"""Apply the app store's Alembic migrations (on every start) and report where it stands."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from nightowl.store.database import Database

_MIGRATIONS = Path(__file__).parent / "migrations"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


def upgrade(database: Database, revision: str = "head") -> None:
    """Bring the store's schema to the newest revision, or to `revision` (tests of a data
    migration); a no-op when it is there."""
    config = _config()
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def revision_status(database: Database) -> tuple[str | None, str]:
    """The store's current revision and the newest one this code knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    with database.read_engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current, str(head)


def make_revision(database: Database, message: str) -> None:
    """Autogenerate a new migration from the tables (a development aid)."""
    config = _config()
    with database.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.revision(config, message=message, autogenerate=True)
