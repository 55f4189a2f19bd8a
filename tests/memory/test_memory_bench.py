"""The memory benchmark (bench/memory.py) on a shortened history, on SQLite and PostgreSQL:
400 generated messages about the same subjects as the 100 planted facts. Search by meaning
(with each item's density taken off) fused with strong full-text hits finds at least nine in
ten facts in its top 5 from paraphrased questions; full-text alone finds few."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.memory import measure

from nightowl.memory.embedder import MiniLM
from nightowl.memory.semantic import SemanticIndex
from tests.databases import BACKENDS


@pytest.fixture(scope="module")
def semantic() -> SemanticIndex:
    return SemanticIndex(MiniLM)


@pytest.mark.parametrize("backend", BACKENDS)
def test_paraphrased_questions_find_their_facts(
    backend: str, tmp_path: Path, semantic: SemanticIndex
) -> None:
    report = measure(backend, tmp_path, semantic, filler_count=400)
    assert report["messages"] == 500
    assert report["recall_at_5_hybrid"] >= 0.9
    assert report["recall_at_5_fulltext"] < 0.5
