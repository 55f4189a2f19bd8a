"""Semantic memory search (all-MiniLM-L6-v2 in numpy; `make test` installs it) on SQLite and
PostgreSQL: paraphrases find what full-text misses, fused by reciprocal rank; embeddings
follow edits and never cross users."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from nightowl.memory.embedder import MiniLM
from nightowl.memory.facts import Source, add_fact, replace_fact
from nightowl.memory.hybrid import fuse, search_memory
from nightowl.memory.search import Hit, full_text_search
from nightowl.memory.semantic import SemanticIndex
from nightowl.memory.semantic_setup import installed_semantic_index
from nightowl.store.database import Database
from nightowl.store.users import create_user, ensure_owner


@pytest.fixture(scope="module")
def semantic() -> SemanticIndex:
    return SemanticIndex(MiniLM)


def test_the_embedder_puts_paraphrases_together(semantic: SemanticIndex) -> None:
    texts = [
        "My dentist is Dr. Okafor on Elm Street.",
        "Who looks after my teeth?",
        "The recycling is collected on Thursdays.",
    ]
    vectors = semantic.embedder.embed(texts)
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar, unrelated = float(vectors[0] @ vectors[1]), float(vectors[1] @ vectors[2])
    assert similar > unrelated + 0.2
    # Batching (and its padding) does not change a text's vector.
    alone = semantic.embedder.embed([texts[1]])[0]
    assert np.allclose(alone, vectors[1], atol=1e-4)
    assert installed_semantic_index() is not None


def test_fusion_rewards_agreement() -> None:
    at = datetime(2026, 11, 1, tzinfo=UTC)
    a, b, c = (Hit("fact", n, n, at, 0.0) for n in "abc")
    fused = fuse([[a, b], [c, b]], limit=3)
    assert fused[0].item_id == "b"
    assert {h.item_id for h in fused} == {"a", "b", "c"}
    # A lighter first ranking: its top item falls behind the second ranking's.
    weighted = fuse([[a], [c]], limit=2, weights=[0.5, 1.0])
    assert [h.item_id for h in weighted] == ["c", "a"]


def test_a_paraphrase_finds_a_fact_full_text_misses(
    database: Database, semantic: SemanticIndex
) -> None:
    with database.write() as session:
        owner = ensure_owner(session).id
        other = create_user(session, "dana").id
        dentist = add_fact(session, owner, "My dentist is Dr. Okafor on Elm Street.", Source())
        add_fact(session, owner, "The recycling is collected on Thursdays.", Source())
        add_fact(session, other, "Dana's dentist is Dr. Weiss.", Source())
        assert semantic.embed_pending(session) == 3
        assert semantic.embed_pending(session) == 0
    question = "Who looks after my teeth?"
    with database.read() as session:
        assert full_text_search(session, owner, question) == []
        hits = search_memory(session, owner, question, limit=1, semantic=semantic)
        assert [h.item_id for h in hits] == [dentist.id]
        theirs = search_memory(session, other, question, limit=5, semantic=semantic)
        assert all("Okafor" not in h.text for h in theirs)
    # An edit drops the old embedding (the index row is rewritten); the next pass re-embeds.
    with database.write() as session:
        replace_fact(session, owner, dentist.id, "My dentist is Dr. Adeyemi near the station.")
        assert semantic.embed_pending(session) == 1
    with database.read() as session:
        (hit,) = search_memory(session, owner, question, limit=1, semantic=semantic)
    assert "Adeyemi" in hit.text
