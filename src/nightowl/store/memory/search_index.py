"""Full-text matching over the memory index (`memory_index`): SQLite's FTS5 (porter stemming,
bm25) or PostgreSQL's English full-text search (tsvector, GIN index, ts_rank_cd). Ranking the
matches is memory/search.py's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import text
from sqlalchemy.orm import Session

from nightowl.store.tables import utcnow


class TextMatch(NamedTuple):
    """An indexed item that matches a query, and its relevance (higher is better)."""

    kind: str
    item_id: str
    body: str
    at: datetime
    relevance: float


def _kind_filter(chosen: Sequence[str]) -> tuple[str, dict[str, str]]:
    names = {f"k{n}": kind for n, kind in enumerate(chosen)}
    return "i.kind IN (" + ", ".join(f":{name}" for name in names) + ")", names


def _sqlite(
    session: Session,
    user_id: str,
    words: list[str],
    kinds: Sequence[str],
    now: datetime,
    limit: int,
) -> list[TextMatch]:
    match = " OR ".join(f'"{word}"' for word in words)
    kind_sql, kind_params = _kind_filter(kinds)
    rows = session.execute(
        text(
            "SELECT i.kind, i.item_id, i.body, i.at, -bm25(memory_fts) AS relevance"
            " FROM memory_fts JOIN memory_index i ON i.id = memory_fts.rowid"
            " WHERE memory_fts MATCH :match AND i.user_id = :user"
            f" AND (i.expires_at IS NULL OR i.expires_at > :now) AND {kind_sql}"
            " ORDER BY bm25(memory_fts) LIMIT :limit"
        ),
        {
            "match": match,
            "user": user_id,
            "now": now.replace(tzinfo=None),
            "limit": limit,
            **kind_params,
        },
    )
    return [TextMatch(r[0], r[1], r[2], _aware(r[3]), float(r[4])) for r in rows]


def _postgres(
    session: Session,
    user_id: str,
    words: list[str],
    kinds: Sequence[str],
    now: datetime,
    limit: int,
) -> list[TextMatch]:
    kind_sql, kind_params = _kind_filter(kinds)
    rows = session.execute(
        text(
            "SELECT i.kind, i.item_id, i.body, i.at, ts_rank_cd(i.tsv, q, 1) AS relevance"
            " FROM memory_index i, to_tsquery('english', :match) q"
            " WHERE i.tsv @@ q AND i.user_id = :user"
            f" AND (i.expires_at IS NULL OR i.expires_at > :now) AND {kind_sql}"
            " ORDER BY relevance DESC LIMIT :limit"
        ),
        {
            "match": " | ".join(words),
            "user": user_id,
            "now": now,
            "limit": limit,
            **kind_params,
        },
    )
    return [TextMatch(r[0], r[1], r[2], _aware(r[3]), float(r[4])) for r in rows]


def _aware(value: datetime | str) -> datetime:
    if isinstance(value, str):  # SQLite hands raw text back from a text() query
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=utcnow().tzinfo)


def full_text_matches(
    session: Session,
    user_id: str,
    words: list[str],
    kinds: Sequence[str],
    now: datetime,
    limit: int,
) -> list[TextMatch]:
    """Up to `limit` of the user's live items of `kinds` holding any of `words`, most
    relevant first."""
    backend = _postgres if session.get_bind().dialect.name == "postgresql" else _sqlite
    return backend(session, user_id, words, kinds, now, limit)
