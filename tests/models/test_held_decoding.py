"""Decoding held to a grammar, checked one token at a time (models/held_decoding.py): the same
tokens as llama-cpp-python's own grammar sampling, which checks every token of the vocabulary
at every step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nightowl.models.call_schema import call_schema, grammar_rules
from nightowl.models.chatml import read_reply
from nightowl.models.held_decoding import generate_held, penalised
from nightowl.models.local_worker import CONTEXT_TOKENS, REPEAT_PENALTY
from nightowl.models.weights import weights_path
from nightowl.tools.builtin import builtin_registry


def test_the_repetition_penalty_is_llama_cpps() -> None:
    logits = np.array([2.0, -2.0, 1.0, 4.0], dtype=np.float32)
    out = penalised(logits, [0, 1, 1], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, 4.0]
    assert logits.tolist() == [2.0, -2.0, 1.0, 4.0]  # the model's own logits are not touched
    assert penalised(logits, [], 2.0) is logits


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
        "<|im_start|>system\nYou answer with one tool call: send_to_user with text and final."
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
    held, written = generate_held(llm, tokens, 0, rules, 80, REPEAT_PENALTY, lambda: False)
    assert held == library, (held, library)
    assert 0 < written <= 80
    _, calls = read_reply("<tool_call>\n" + held, set(specs))
    assert [c.name for c in calls] == ["send_to_user"], held
    assert json.loads(held)["arguments"]["text"]
