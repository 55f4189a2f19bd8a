"""Alembic environment: migrate the app store the `Database` points at."""

from __future__ import annotations

from alembic import context

from nightowl.store.tables import Base

config = context.config
connection = config.attributes.get("connection")

if connection is None:
    raise RuntimeError("run migrations through nightowl.store.migrate.upgrade()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
