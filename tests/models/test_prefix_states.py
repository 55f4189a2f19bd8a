"""Saved prefix states: written whole, found again by a later worker, refused when they do
not match (file handling without the model); and, on the real local model, a conversation
started from a saved state answers its own question (the state is not a stale one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nightowl.messages import Entry, ModelRequest
from nightowl.models.chatml import render, system_block
from nightowl.models.local_worker import Slots
from nightowl.models.prefix_states import PrefixState, PrefixStates, state_key
from nightowl.models.weights import weights_path


def test_a_saved_state_is_found_by_a_later_process_and_only_for_its_own_tokens(
    tmp_path: Path,
) -> None:
    state = PrefixState((1, 2, 3), b"kv" * 1000)
    PrefixStates("runtime A", tmp_path).save(state)
    later = PrefixStates("runtime A", tmp_path)
    assert later.find([1, 2, 3]) == state
    assert later.find([1, 2, 4]) is None
    assert PrefixStates("runtime B", tmp_path).find([1, 2, 3]) is None  # other weights


def test_a_cut_file_is_refused_and_removed(tmp_path: Path) -> None:
    PrefixStates("r", tmp_path).save(PrefixState((5, 6), b"x" * 500))
    [path] = tmp_path.glob("*.kv")
    path.write_bytes(path.read_bytes()[:-10])  # a crash mid-write elsewhere, a full disk
    assert PrefixStates("r", tmp_path).find([5, 6]) is None
    assert not path.exists()


def test_only_the_newest_files_are_kept(tmp_path: Path) -> None:
    states = PrefixStates("r", tmp_path, keep=1, keep_files=2)
    for n in range(4):
        states.save(PrefixState((n,), b"d"))
    names = {p.stem for p in tmp_path.glob("*.kv")}
    assert names == {state_key("r", [2]), state_key("r", [3])}
    assert not list(tmp_path.glob("*.tmp"))


def _prompt(instructions: str, question: str) -> tuple[str, int]:
    request = ModelRequest(
        system=instructions,
        tools=(),
        messages=(Entry(kind="user", text=question, trust="owner"),),
    )
    return render(request), len(system_block(request))


INSTRUCTIONS = (
    "You are a terse assistant. Answer every question with one lowercase word and nothing "
    "else. " * 20
)


@pytest.mark.slow
@pytest.mark.xdist_group("local-model")
@pytest.mark.timeout(900)
def test_a_conversation_started_from_a_saved_state_answers_its_own_question(
    tmp_path: Path,
) -> None:
    assert weights_path().is_file(), "make test installs the weights (nightowl models install)"
    never = lambda: False  # noqa: E731
    first = Slots(weights_path(), 2, tmp_path)
    prompt, prefix = _prompt(INSTRUCTIONS, "What colour is a ripe banana?")
    answer = first.complete("main", prompt, 8, never, prefix)
    assert "yellow" in answer["text"].lower(), answer
    prefix_tokens = answer["cached_tokens"]
    assert prefix_tokens == 0  # nothing was held or saved: all evaluated (and saved)
    # A later worker (a restart): the prefix comes from the file, only the question is new.
    later = Slots(weights_path(), 2, tmp_path)
    prompt, prefix = _prompt(INSTRUCTIONS, "What colour is fresh snow?")
    answer = later.complete("main", prompt, 8, never, prefix)
    assert "white" in answer["text"].lower(), answer
    assert answer["cached_tokens"] > 200 and answer["prompt_tokens"] - answer["cached_tokens"] < 40
    # Another conversation's prefix in between, then back: from the saved state again, and
    # the answer is to the new question, not the context's previous one.
    other, other_prefix = _prompt("Answer in French, one word.", "What colour is grass?")
    later.complete("main", other, 8, never, other_prefix)
    prompt, prefix = _prompt(INSTRUCTIONS, "What colour is the clear daytime sky?")
    answer = later.complete("main", prompt, 8, never, prefix)
    assert "blue" in answer["text"].lower(), answer
    assert answer["cached_tokens"] > 200
    # Warming (no tokens to generate) only makes the context hold the prefix.
    warm = later.complete("side", prompt[:prefix], 0, never, prefix)
    assert warm["text"] == "" and warm["output_tokens"] == 0
