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
from nightowl.memory.search import Hit, full_text_search, word_coverage
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


def test_chatter_in_many_near_copies_gives_way_to_a_fact_said_once(
    database: Database, semantic: SemanticIndex
) -> None:
    verbs = ["Look into", "Please check", "Sort out", "Any news on", "Remind me about", "Book"]
    verbs += ["Cancel", "Summarise"]
    tails = ["tomorrow", "today", "this month", "when you can", "later", "next week"]
    chatter = [f"{verb} the car {tail}?" for verb in verbs for tail in tails]
    fact = "My car is a blue 2016 Volvo V60."
    question = "What vehicle do I drive?"
    with database.write() as session:
        owner = ensure_owner(session).id
        for text in chatter:
            add_fact(session, owner, text, Source())
        # Said three times: exact repeats do not count toward its own density.
        ids = [add_fact(session, owner, fact, Source()).id for _ in range(3)]
        assert semantic.embed_pending(session) == len(chatter) + 3
    with database.read() as session:
        now = datetime.now(UTC)
        plain = semantic.embedder.embed([question, fact, *chatter])
        by_similarity = sorted(
            chatter, key=lambda t: -float(plain[0] @ plain[2 + chatter.index(t)])
        )
        # By similarity alone the chatter about the car comes first …
        assert float(plain[0] @ plain[1]) < float(
            plain[0] @ plain[2 + chatter.index(by_similarity[0])]
        )
        # … with its density taken off, the fact does (once: repeats are one hit).
        hits = semantic.search(session, owner, question, kinds=None, limit=3, now=now)
    assert hits[0].item_id in ids and hits[0].text == fact
    assert [h.text for h in hits].count(fact) == 1


class _Meaning:
    """A ranking by meaning that knows nothing of names: always the same two items."""

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    def search(self, *_: object, **__: object) -> list[Hit]:
        return self.hits

    def embed_pending(self, *_: object, **__: object) -> int:
        return 0

    def embed_pending_in(self, *_: object, **__: object) -> int:
        return 0


def test_a_name_only_full_text_finds_still_makes_the_top_of_the_fusion(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session).id
        locker = add_fact(session, owner, "The gym locker code is 7391.", Source())
        weak = add_fact(session, owner, "The gym is closed on Sundays.", Source())
        others = [add_fact(session, owner, f"Unrelated fact number {n}.", Source()) for n in "ab"]
    at = datetime(2026, 11, 1, tzinfo=UTC)
    meaning = _Meaning([Hit("fact", f.id, f.text, at, 0.5) for f in others])
    with database.read() as session:
        hits = search_memory(session, owner, "gym locker code", limit=3, semantic=meaning)
        # One shared word out of three is not enough to join the fusion.
        lone = search_memory(session, owner, "gym opening hours", limit=3, semantic=meaning)
    assert hits[0].item_id == locker.id
    assert weak.id not in [h.item_id for h in lone]


def test_word_coverage_compares_stems() -> None:
    assert word_coverage("meetings on Friday", "The meeting moved to friday.") == 1.0
    assert (
        word_coverage(
            "Which commute departure in the morning?", "Sort out the flight in the morning?"
        )
        == 1 / 3
    )
    assert word_coverage("the a of", "anything") == 0.0


def test_a_vector_embedded_outside_a_transaction_is_not_stored_for_an_edited_item(
    database: Database, semantic: SemanticIndex
) -> None:
    with database.write() as session:
        owner = ensure_owner(session).id
        fact = add_fact(session, owner, "My dentist is Dr. Okafor on Elm Street.", Source())
    with database.read() as session:
        items = semantic.pending(session, owner)
    vectors = semantic.embed(items)  # meanwhile, the owner edits the fact
    with database.write() as session:
        replace_fact(session, owner, fact.id, "My dentist is Dr. Adeyemi near the station.")
    with database.write() as session:
        assert semantic.store(session, items, vectors) == 0  # the old text's vector is dropped
    assert semantic.embed_pending_in(database, owner) == 1
    assert semantic.embed_pending_in(database, owner) == 0
    with database.read() as session:
        (hit,) = semantic.search(
            session, owner, "Who is my dentist?", kinds=None, limit=1, now=datetime.now(UTC)
        )
    assert "Adeyemi" in hit.text
