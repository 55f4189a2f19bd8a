"""Full-text search over a user's messages, work log, notes, skills and facts.

SQLite matches with FTS5 (porter stemming, bm25); PostgreSQL with its English full-text search
(tsvector, GIN index, ts_rank_cd); the queries are store/memory/search_index.py's. Hits are
ranked by relevance, then nudged by recency, and never leave the user they belong to.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from sqlalchemy.orm import Session

from nightowl.store.memory.search_index import full_text_matches
from nightowl.store.tables import utcnow

Kind = Literal["message", "log", "note", "skill", "fact"]
KINDS: tuple[str, ...] = get_args(Kind)
CANDIDATES = 60  # best matches by relevance, re-ranked with recency
RECENCY_DAYS = 30.0  # an item this old weighs about 0.8 of a new one of equal relevance
_STOPWORDS = """
a an and are as at be but by can do does did for from had has have he her his how i if in
into is it its me my no not of on or our she so that the their them then there these they
this to was we were what when where which who whom why will with would you your
"""
STOPWORDS = frozenset(_STOPWORDS.split())
WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True)
class Hit:
    """One search result."""

    kind: str
    item_id: str
    text: str
    at: datetime
    score: float


def query_words(query: str) -> list[str]:
    """The words of a query worth matching (lowercase, no stopwords, no duplicates)."""
    words: list[str] = []
    for word in WORD.findall(query.lower()):
        if word not in STOPWORDS and word not in words:
            words.append(word)
    return words[:32]


def _stem(word: str) -> str:
    """A word without its commonest English endings (meetings, meeting -> meet), enough to
    compare a query's words with a text's; the databases stem properly for matching."""
    for suffix in ("es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    for suffix in ("ing", "ed", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def word_coverage(query: str, text: str) -> float:
    """The share of the query's words (as `query_words` picks them) that `text` holds."""
    wanted = {_stem(w) for w in query_words(query)}
    if not wanted:
        return 0.0
    held = {_stem(w) for w in WORD.findall(text.lower())}
    return len(wanted & held) / len(wanted)


def rank(
    found: Sequence[tuple[str, str, str, datetime, float]], now: datetime, limit: int
) -> list[Hit]:
    """Order matches by relevance (scaled to the best one), weighted by recency."""
    if not found:
        return []
    best = max(relevance for *_, relevance in found) or 1.0
    hits = []
    for kind, item_id, body, at, relevance in found:
        age_days = max(0.0, (now - at).total_seconds() / 86400)
        recency = math.exp(-age_days / RECENCY_DAYS / 4.5)
        score = (relevance / best) * (0.8 + 0.2 * recency)
        hits.append(Hit(kind, item_id, body, at, round(score, 6)))
    hits.sort(key=lambda h: (-h.score, -h.at.timestamp(), h.item_id))
    return distinct(hits)[:limit]


def distinct(hits: Sequence[Hit]) -> list[Hit]:
    """Hits without repeats: of items with the same text only the first (best) stays."""
    seen: set[str] = set()
    kept = []
    for hit in hits:
        key = " ".join(hit.text.lower().split())
        if key not in seen:
            seen.add(key)
            kept.append(hit)
    return kept


def full_text_search(
    session: Session,
    user_id: str,
    query: str,
    *,
    kinds: Sequence[str] | None = None,
    limit: int = 10,
    now: datetime | None = None,
) -> list[Hit]:
    """The user's best matches for `query` (any word may match; more and rarer words rank
    higher), newest first among equals. An empty query finds nothing."""
    words = query_words(query)
    if not words:
        return []
    moment = now or utcnow()
    chosen = [k for k in (kinds or KINDS) if k in KINDS]
    found = full_text_matches(session, user_id, words, chosen, moment, CANDIDATES)
    return rank(found, moment, limit)
