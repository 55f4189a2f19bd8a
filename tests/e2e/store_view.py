"""Read what a server process stored, straight from its database."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, create_engine, text

# One engine per database for the whole test process: tests poll the store many times a
# second, and a new engine per read opened a new connection each time (a PostgreSQL backend
# started for every poll: ~20 ms and a core's worth of work across the suite).
_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def _engine(url: str) -> Engine:
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = create_engine(url, pool_size=2, pool_pre_ping=True)
        return engine


def rows(url: str, query: str, **params: Any) -> list[tuple[Any, ...]]:
    """Run a read query against the app store at `url`."""
    with _engine(url).connect() as connection:
        return [tuple(row) for row in connection.execute(text(query), params)]


def forget(url: str) -> None:
    """Close the connections to `url` (before its database is dropped)."""
    with _lock:
        engine = _engines.pop(url, None)
    if engine is not None:
        engine.dispose()


def calls_finished(url: str) -> bool:
    """True when every model call the server started has finished (a call's row is written
    when it starts and gets its tokens when it ends)."""
    return rows(url, "SELECT count(*) FROM model_calls WHERE finished_at IS NULL") == [(0,)]


def memory_passes_done(url: str) -> bool:
    """True when every finished turn has had its memory pass and no model call is running:
    the server's background work after the turns is over."""
    missing = rows(
        url,
        "SELECT count(*) FROM turns t WHERE t.status = 'done' AND NOT EXISTS "
        "(SELECT 1 FROM memory_passes p WHERE p.turn_id = t.id)",
    )
    return missing == [(0,)] and calls_finished(url)
