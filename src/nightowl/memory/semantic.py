"""Semantic search (optional): embeddings of indexed items as float32 blobs, ranked by exact
cosine similarity in numpy. The embedder loads on first use, so a server that never searches
by meaning never pays for the model.

Ranking reduces hubness (as CSLS does for nearest-neighbour retrieval): an item's score is its
similarity to the query minus half its density, the mean similarity to its ten nearest other
items. Everyday chatter ("can you check the meeting tomorrow?") comes in many near-copies that
sit close to every question on the same topic; a fact said once stands alone. On
bench/memory.py this lifts recall@5 by meaning alone from 0.80 to about 0.95. Exact repeats of
an item do not count toward its density, so a fact the owner repeats is not pushed down.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

import numpy as np
from numpy.typing import NDArray
from sqlalchemy.orm import Session

from nightowl.memory.embedder import one_blas_thread
from nightowl.memory.search import KINDS, Hit, distinct
from nightowl.store.database import Database
from nightowl.store.memory.vectors import (
    Pending,
    indexed_items,
    items_without_vectors,
    user_vectors,
    vectors_stamp,
    write_vectors,
)

MAX_EMBED_CHARS = 1_000
MAX_CACHED_USERS = 32  # users whose vectors stay in memory between searches
CANDIDATES = 100  # nearest items by plain similarity, re-ranked by density
NEIGHBOURS = 10  # an item's density: its mean similarity to this many nearest other items
DENSITY_WEIGHT = 0.5
REPEAT = 0.98  # a similarity this high is the item itself or an exact repeat of it
MIN_FOR_DENSITY = 4 * NEIGHBOURS  # below this many items, density says nothing
DENSITY_SAMPLE = 4_096  # density against at most this many items (evenly spread)
DENSITY_STALE = 0.1  # densities are recomputed once the user's items grew by this share
# A user's vectors in memory: their (kind, item id) keys, kinds, and the matrix.
Loaded = tuple[list[tuple[str, str]], NDArray[np.str_], NDArray[np.float32]]


class Embedder(Protocol):
    """Text in, unit vectors out."""

    name: str

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> NDArray[np.float32]:
        """One unit vector per text."""
        ...


class SemanticIndex:
    """Embeds what the search index holds and ranks a user's items by meaning."""

    def __init__(self, make_embedder: type[Embedder] | None = None) -> None:
        self._make = make_embedder
        self._embedder: Embedder | None = None
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple[int, int], Loaded]] = {}
        # Per user: the item count the densities were computed at, and the densities.
        self._density: dict[str, tuple[int, dict[tuple[str, str], float]]] = {}

    @property
    def embedder(self) -> Embedder:
        """The embedder, loaded on first use (EmbedderUnavailable when not installed)."""
        with self._lock:
            if self._embedder is None:
                if self._make is None:
                    from nightowl.memory.embedder import MiniLM

                    self._embedder = MiniLM()
                else:
                    self._embedder = self._make()
            return self._embedder

    def _vectors(self, session: Session, user_id: str) -> Loaded | None:
        """The user's (keys, kinds, matrix), read again only when a vector was added or
        removed since (their count and newest id say so)."""
        stamp = vectors_stamp(session, user_id)
        if stamp is None:
            return None
        with self._lock:
            cached = self._cache.get(user_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows = user_vectors(session, user_id)
        keys = [(r.kind, r.item_id) for r in rows]
        matrix = np.frombuffer(b"".join(r.vector for r in rows), dtype=np.float32)
        loaded = (keys, np.array([k for k, _ in keys]), matrix.reshape(len(rows), -1))
        with self._lock:
            self._cache[user_id] = (stamp, loaded)
            while len(self._cache) > MAX_CACHED_USERS:
                self._cache.pop(next(iter(self._cache)))
        return loaded

    def pending(
        self, session: Session, user_id: str | None = None, limit: int = 256
    ) -> list[Pending]:
        """Up to `limit` indexed items that have no vector yet, oldest first."""
        return items_without_vectors(session, user_id, limit)

    def store(self, session: Session, items: list[Pending], vectors: NDArray[np.float32]) -> int:
        """Write the vectors of `items` (embedded from the bodies they were read with), but
        not of an item edited, deleted or embedded since; how many were written."""
        blobs = [vector.astype(np.float32).tobytes() for vector in vectors]
        return write_vectors(session, items, blobs, self.embedder.name)

    def embed(self, items: list[Pending]) -> NDArray[np.float32]:
        """The vectors of `items`' bodies (their beginnings, for long ones)."""
        return self.embedder.embed([body[:MAX_EMBED_CHARS] for _, _, _, body in items])

    def embed_pending(self, session: Session, user_id: str | None = None, limit: int = 256) -> int:
        """Embed up to `limit` indexed items that have no vector yet, in `session`'s
        transaction; how many were."""
        items = self.pending(session, user_id, limit)
        return self.store(session, items, self.embed(items)) if items else 0

    def embed_pending_in(
        self, database: Database, user_id: str | None = None, limit: int = 256
    ) -> int:
        """Like `embed_pending`, but the model runs outside any transaction: on SQLite a
        write transaction holds the store's only write lock, and every message and turn of
        the server would wait for the embedding. How many items were read (0: none left)."""
        with database.read() as session:
            items = self.pending(session, user_id, limit)
        if not items:
            return 0
        vectors = self.embed(items)
        with database.write() as session:
            self.store(session, items, vectors)
        return len(items)

    def search(
        self,
        session: Session,
        user_id: str,
        query: str,
        *,
        kinds: Sequence[str] | None,
        limit: int,
        now: datetime,
    ) -> list[Hit]:
        """The user's live items nearest in meaning to `query`, best first."""
        chosen = [k for k in (kinds or KINDS) if k in KINDS]
        vectors = self._vectors(session, user_id)
        if vectors is None or not query.strip():
            return []
        keys, kinds_of, matrix = vectors
        target = self.embedder.embed([query[:MAX_EMBED_CHARS]])[0]
        # einsum, not BLAS: BLAS threads spin against a busy machine for a product this small.
        scores = np.einsum("ij,j->i", matrix, target)
        if len(chosen) < len(KINDS):
            scores[~np.isin(kinds_of, chosen)] = -np.inf
        depth = max(CANDIDATES, limit * 3)
        near = [int(i) for i in np.argsort(-scores)[:depth] if np.isfinite(scores[i])]
        density = self._densities(user_id, keys, matrix, near)
        adjusted = {
            keys[i]: float(scores[i]) - DENSITY_WEIGHT * density[n] for n, i in enumerate(near)
        }
        wanted = dict(sorted(adjusted.items(), key=lambda kv: -kv[1])[: limit * 3])
        found = indexed_items(session, user_id, [key[1] for key in wanted])
        hits = [
            Hit(kind, item_id, body, at, round(wanted[(kind, item_id)], 6))
            for kind, item_id, body, at, expires in found
            if (kind, item_id) in wanted and (expires is None or expires > now)
        ]
        hits.sort(key=lambda h: (-h.score, -h.at.timestamp(), h.item_id))
        return distinct(hits)[:limit]

    def _densities(
        self,
        user_id: str,
        keys: list[tuple[str, str]],
        matrix: NDArray[np.float32],
        rows: list[int],
    ) -> list[float]:
        """The density of each of `rows`: its mean similarity to its nearest other items
        (0 while the user has too few items to tell). Kept per user until the user's items
        have grown by a tenth."""
        count = len(keys)
        if count < MIN_FOR_DENSITY:
            return [0.0] * len(rows)
        with self._lock:
            computed_at, known = self._density.get(user_id, (count, {}))
            if abs(count - computed_at) > DENSITY_STALE * computed_at:
                computed_at, known = count, {}
            missing = [i for i in rows if keys[i] not in known]
        if missing:
            step = max(1, count // DENSITY_SAMPLE)
            reference = matrix[::step]
            with one_blas_thread():
                similar = matrix[missing] @ reference.T
            similar[similar >= REPEAT] = -1.0
            nearest = np.sort(similar, axis=1)[:, -NEIGHBOURS:]
            found = dict(
                zip((keys[i] for i in missing), nearest.mean(axis=1).tolist(), strict=True)
            )
            with self._lock:
                known = {**known, **found}
                self._density[user_id] = (computed_at, known)
                while len(self._density) > MAX_CACHED_USERS:
                    self._density.pop(next(iter(self._density)))
        return [known[keys[i]] for i in rows]
