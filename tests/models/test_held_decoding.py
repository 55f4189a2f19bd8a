"""Decoding held to a grammar, checked one token at a time (models/held_decoding.py): the same
tokens as llama-cpp-python's own grammar sampling, which checks every token of the vocabulary
at every step, with or without drafts from the context."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nightowl.models.call_schema import call_schema, grammar_rules
from nightowl.models.chatml import read_reply
from nightowl.models.held_decoding import Drafts, generate_held, penalised
from nightowl.models.local_worker import CONTEXT_TOKENS, REPEAT_PENALTY
from nightowl.models.weights import weights_path
from nightowl.tools.builtin import builtin_registry


def test_the_repetition_penalty_is_llama_cpps() -> None:
    logits = np.array([2.0, -2.0, 1.0, 4.0], dtype=np.float32)
    out = penalised(logits, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, 4.0]
    assert logits.tolist() == [2.0, -2.0, 1.0, 4.0]  # the model's own logits are not touched
    assert penalised(logits, [], 2.0) is logits


def test_a_draft_is_what_followed_the_newest_tokens_when_they_last_occurred() -> None:
    drafts = Drafts([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    assert drafts.draft(8) == []  # (3, 7, 8) never occurred before
    for token in (1, 2, 3):
        drafts.add(token)
    assert drafts.draft(3) == [4, 5, 9]  # after (1, 2, 3) at the start
    drafts.add(4)
    assert drafts.draft(2) == [5, 9]
    assert drafts.draft(0) == []
    assert Drafts([5, 6, 7, 1, 6, 7]).draft(2) == []  # two tokens are not a match
    assert Drafts([6, 7]).draft(4) == []


@pytest.mark.slow
@pytest.mark.xdist_group("local-model")
@pytest.mark.timeout(600)
def test_held_decoding_writes_what_the_librarys_grammar_sampling_writes() -> None:
    from llama_cpp import Llama, LlamaGrammar

    specs = builtin_registry().specs()
    schema = call_schema([specs["send_to_user"], specs["write_note"]], ["shell"])
    rules = grammar_rules(schema)
    llm = Llama(str(weights_path()), n_ctx=CONTEXT_TOKENS, n_threads=1, verbose=False)
    prompt = (
        "<|im_start|>system\nYou answer with one tool call: send_to_user with text and final, "
        'like {"name": "send_to_user", "arguments": {"text": "Hello.", "final": true}}.'
        "<|im_end|>\n<|im_start|>user\nWrite a two-line poem about the sea.<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
    )
    tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    library = llm.create_completion(
        tokens,
        max_tokens=80,
        temperature=0.0,
        repeat_penalty=REPEAT_PENALTY,
        grammar=LlamaGrammar.from_string(rules, verbose=False),
    )["choices"][0]["text"]
    llm.reset()
    one_by_one, written, drafted = generate_held(
        llm, tokens, 0, rules, 80, REPEAT_PENALTY, lambda: False, draft_tokens=0
    )
    assert one_by_one == library, (one_by_one, library)
    assert 0 < written <= 80
    assert drafted == 0
    # With drafts from the context (a batch's logits differ slightly from one token's, so
    # the text may differ where two tokens are nearly tied): a well-formed call all the same,
    # its structure taken from the example in the prompt.
    held, _, drafted = generate_held(
        llm, tokens, llm.n_tokens, rules, 80, REPEAT_PENALTY, lambda: False
    )
    assert held[:40] == library[:40], (held, library)
    assert drafted >= 3  # at least '", "arguments": {' came from the example
    _, calls = read_reply("<tool_call>\n" + held, set(specs))
    assert [c.name for c in calls] == ["send_to_user"], held
    assert json.loads(held)["arguments"]["text"]
