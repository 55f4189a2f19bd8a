"""Read what a server process stored, straight from its database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, text


def rows(url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """Run a read query against the app store at `url`."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query), params)]
    finally:
        engine.dispose()
