"""Memory search on a long generated history: recall@5 and latency, full-text alone and hybrid.

A user's history of 2,000 generated messages (everyday chatter over 20 conversations, sharing
many words with the questions) has 100 facts planted in it (bench/memory_facts.py). Each fact
is then asked for with a paraphrased question; a hit is the planted message among the top 5.
Hybrid = full-text fused with all-MiniLM-L6-v2 embeddings by reciprocal rank fusion.
Latency is one search through the store (the query's embedding included for hybrid), on
SQLite and on PostgreSQL.

Prints JSON with `recall_at_5_fulltext`, `recall_at_5_hybrid`, `search_p50_ms`,
`search_p95_ms` (hybrid, SQLite) and the same per backend. Targets: hybrid recall@5 >= 0.9,
p95 < 50 ms.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # importable as bench.memory too

from common import BACKENDS, fresh_database, percentile
from memory_facts import PLANTED
from nightowl.memory.hybrid import search_memory
from nightowl.memory.search import full_text_search
from nightowl.memory.semantic import SemanticIndex
from nightowl.store.conversations import (
    NewMessage,
    append_messages,
    create_conversation,
)
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.users import ensure_owner

FILLER = 2_000
CONVERSATIONS = 20
SUBJECTS = [
    "the meeting",
    "my train",
    "the report",
    "dinner",
    "the doctor",
    "our holiday",
    "the car",
    "the kids",
    "work",
    "the weather",
    "the budget",
    "my phone",
    "the garden",
    "the flat",
    "the team",
    "lunch",
    "the invoice",
    "the gym",
    "the dog",
    "my laptop",
    "the weekend",
    "the school run",
    "the flight",
    "the bank",
    "the project",
    "coffee",
    "the book",
]
VERBS = [
    "can we move",
    "please check",
    "remind me about",
    "what's happening with",
    "I forgot",
    "let's talk about",
    "any news on",
    "I'm worried about",
    "sort out",
    "book",
    "cancel",
    "look into",
    "summarise",
    "draft a note about",
    "find the details of",
]
TAILS = [
    "tomorrow",
    "next week",
    "before Friday",
    "this afternoon",
    "when you can",
    "today",
    "later",
    "after lunch",
    "by Monday",
    "tonight",
    "in the morning",
    "this month",
]


def filler(rng: random.Random) -> str:
    """An everyday message that shares words with the questions but answers none of them."""
    return f"{rng.choice(VERBS).capitalize()} {rng.choice(SUBJECTS)} {rng.choice(TAILS)}?"


def build_history(database: Database, filler_count: int = FILLER) -> tuple[str, list[str]]:
    """The owner and the ids of the planted messages, in PLANTED's order."""
    rng = random.Random(8)
    with database.write() as session:
        owner = ensure_owner(session).id
        conversations = [create_conversation(session, owner).id for _ in range(CONVERSATIONS)]
    total = filler_count + len(PLANTED)
    slots = sorted(rng.sample(range(total), len(PLANTED)))
    planted_at = dict(zip(slots, range(len(PLANTED)), strict=True))
    planted_ids: list[str] = [""] * len(PLANTED)
    batch: list[tuple[int, NewMessage]] = []
    for position in range(total):
        text = PLANTED[planted_at[position]][0] if position in planted_at else filler(rng)
        role = "user" if position % 2 == 0 or position in planted_at else "agent"
        trust = "owner" if role == "user" else "agent"
        batch.append((position, NewMessage(role, text, trust)))
        if len(batch) == 100 or position == total - 1:
            conversation = conversations[(position // 100) % CONVERSATIONS]
            with database.write() as session:
                stored = append_messages(session, conversation, [m for _, m in batch])
            for (at, _), message in zip(batch, stored, strict=True):
                if at in planted_at:
                    planted_ids[planted_at[at]] = message.id
            batch = []
    return owner, planted_ids


def measure(
    backend: str, folder: Path, semantic: SemanticIndex, filler_count: int = FILLER
) -> dict[str, float]:
    """Recall@5 and latency on `backend` with `filler_count` generated messages."""
    with fresh_database(backend, folder) as url:
        database = Database(url)
        upgrade(database)
        owner, planted = build_history(database, filler_count)
        started = time.perf_counter()
        while True:
            with database.write() as session:
                if not semantic.embed_pending(session, owner, limit=512):
                    break
        embed_s = time.perf_counter() - started
        found_text = found_hybrid = 0
        text_ms: list[float] = []
        hybrid_ms: list[float] = []
        for (_, question), target in zip(PLANTED, planted, strict=True):
            with database.read() as session:
                t0 = time.perf_counter()
                words = full_text_search(session, owner, question, limit=5)
                t1 = time.perf_counter()
                both = search_memory(session, owner, question, limit=5, semantic=semantic)
                t2 = time.perf_counter()
            text_ms.append((t1 - t0) * 1000)
            hybrid_ms.append((t2 - t1) * 1000)
            found_text += target in [h.item_id for h in words]
            found_hybrid += target in [h.item_id for h in both]
        database.dispose()
    return {
        "messages": filler_count + len(PLANTED),
        "recall_at_5_fulltext": found_text / len(PLANTED),
        "recall_at_5_hybrid": found_hybrid / len(PLANTED),
        "search_p50_ms": round(percentile(hybrid_ms, 50), 2),
        "search_p95_ms": round(percentile(hybrid_ms, 95), 2),
        "fulltext_p50_ms": round(percentile(text_ms, 50), 2),
        "fulltext_p95_ms": round(percentile(text_ms, 95), 2),
        "embed_history_s": round(embed_s, 1),
    }


def main() -> None:
    semantic = SemanticIndex()
    semantic.embedder.embed(["warm up"])  # model load is not search latency
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for backend in BACKENDS:
            results[backend] = measure(backend, Path(folder) / backend, semantic)
    main_result = results["sqlite"]
    print(
        json.dumps(
            {
                "recall_at_5_fulltext": main_result["recall_at_5_fulltext"],
                "recall_at_5_hybrid": main_result["recall_at_5_hybrid"],
                "search_p50_ms": main_result["search_p50_ms"],
                "search_p95_ms": main_result["search_p95_ms"],
                "backends": results,
            },
            indent=2,
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
