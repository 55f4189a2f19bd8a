"""Greedy decoding held to a grammar, checking the grammar only where it matters.

llama-cpp-python's sampler chain applies a grammar to every candidate token, all 151,936 of
Qwen's vocabulary, at every step: 22% of a reply's time on 2 cores (15.7 -> 12.3 tokens/s,
measured). llama.cpp's own sampler (common/sampling.cpp) does what this module does: take
the best token as if there were no grammar, ask the grammar about that one token, and only
when it refuses apply the grammar to the whole vocabulary and take the best allowed token.
The result is the same token greedy decoding over the grammar would pick.

Drafts from the context (prompt lookup): a call's JSON repeats what the prompt already holds
(the instructions' example call, earlier calls in the history, the words of a page or file the
model quotes). Where the last tokens written occurred before, the tokens that followed them
then are a draft: the model evaluates the chosen token and the draft in one batch and keeps
the draft's tokens as long as each is the one it would have chosen anyway: 1.2 times the
tokens per second on 2 cores (bench/held_decoding.py). A batch's logits differ slightly from
one token's (llama.cpp multiplies in another order), so where two tokens are nearly tied the
text can differ from decoding one token at a time, as it differs between prompt processing
and generation anyway.

For the local worker's process only: it imports llama.cpp.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from nightowl.models.llama_internals import decode_with_all_logits

PENALTY_WINDOW = 64  # the tokens a repetition penalty looks back over (llama.cpp's default)
# A draft of three costs two single-token passes on 2 cores (one pass 77 ms; 2, 3, 4 and 9
# tokens 116, 147, 150 and 311 ms, measured): short drafts after a three-token match pay, long
# or two-token ones cost more in refused tokens than they save (bench/held_decoding.py).
DRAFT_TOKENS = 3  # the most tokens a draft proposes at once
MATCH_TOKENS = 3  # how many of the newest tokens must have occurred before
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class _Grammar:
    """A llama.cpp grammar sampler, asked about one token or about every token."""

    def __init__(self, llama_cpp: Any, vocab: Any, rules: str, n_vocab: int) -> None:
        self._c = llama_cpp
        self._sampler = llama_cpp.llama_sampler_init_grammar(vocab, rules.encode(), b"root")
        if not self._sampler:
            raise ValueError("llama.cpp could not parse the grammar")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._n_vocab = n_vocab
        self._all: Any = None  # the whole vocabulary's array: made when first refused

    def _apply(self, data: Any, size: int) -> None:
        array = self._c.llama_token_data_array(
            data=ctypes.cast(data, self._c.llama_token_data_p), size=size, selected=-1, sorted=False
        )
        self._c.llama_sampler_apply(self._sampler, ctypes.byref(array))

    def allows(self, token: int) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._apply(self._one, 1)
        return bool(np.isfinite(self._one[0].logit))

    def best_allowed(self, logits: np.ndarray) -> int:
        if self._all is None:
            self._all = (self._c.llama_token_data * self._n_vocab)()
            np.frombuffer(self._all, dtype=_TOKEN_DATA)["id"] = np.arange(self._n_vocab)
        view = np.frombuffer(self._all, dtype=_TOKEN_DATA)
        view["logit"] = logits
        self._apply(self._all, len(logits))
        allowed = view["logit"]
        best = int(np.argmax(allowed))
        if not np.isfinite(allowed[best]):
            raise RuntimeError("the grammar allows no token here")
        return best

    def accept(self, token: int) -> None:
        self._c.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        self._c.llama_sampler_free(self._sampler)


def penalised(logits: np.ndarray, recent: list[int], penalty: float) -> np.ndarray:
    """`logits` with llama.cpp's repetition penalty on the tokens in `recent`: a positive
    logit divided by it, a negative one multiplied."""
    if penalty == 1.0 or not recent:
        return logits
    out = logits.copy()
    seen = np.fromiter(set(recent), dtype=np.int64)
    values = out[seen]
    out[seen] = np.where(values > 0, values / penalty, values * penalty)
    return out


class Drafts:
    """Prompt-lookup drafts: what followed the latest earlier occurrence of the context's last
    `MATCH_TOKENS` tokens."""

    def __init__(self, context: list[int]) -> None:
        self._context: list[int] = []
        self._after: dict[tuple[int, ...], int] = {}
        for token in context:
            self.add(token)

    def add(self, token: int) -> None:
        """Append a token, and index the tokens that end just before it (so a lookup of the
        newest tokens never finds themselves)."""
        context, position = self._context, len(self._context)
        if position >= MATCH_TOKENS:
            self._after[tuple(context[position - MATCH_TOKENS : position])] = position
        context.append(token)

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the newest tokens when they last occurred."""
        start = self._after.get(tuple(self._context[-MATCH_TOKENS:]))
        return [] if start is None else self._context[start : start + limit]


def _evaluate(llm: Any, batch: list[int], n_vocab: int) -> list[np.ndarray]:
    """Evaluate `batch` after the context's `llm.n_tokens` tokens (the KV cache past them is
    dropped first), in one pass; the logits after each of its tokens (valid until the next
    pass). It keeps `llm`'s own record of its context (`input_ids`, `n_tokens`) as `eval` does
    (`Llama.eval` asks logits for the last token only: models/llama_internals.py)."""
    import llama_cpp

    n_past = llm.n_tokens
    decode_with_all_logits(llm, batch)
    llm.input_ids[n_past : n_past + len(batch)] = batch
    llm.n_tokens = n_past + len(batch)
    return [
        np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, i), shape=(n_vocab,))
        for i in range(len(batch))
    ]


def generate_held(
    llm: Any,
    tokens: list[int],
    held: int,
    rules: str,
    max_tokens: int,
    penalty: float,
    stop_now: Callable[[], bool],
    draft_tokens: int = DRAFT_TOKENS,
) -> tuple[str, int, int]:
    """Greedy completion of `tokens` in `llm` (a `llama_cpp.Llama`, whose context holds the
    first `held` of them already), held to the GBNF `rules`. Ends at an
    end-of-generation token (the grammar allows one only once its root is complete), at
    `max_tokens`, or when `stop_now()`. The text, the number of tokens generated, and how
    many of them came from accepted drafts (`draft_tokens` 0: no drafts)."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = int(llm.n_vocab())
    llm.n_tokens = min(held, len(tokens) - 1)  # the last prompt token gives the logits
    llm.eval(tokens[llm.n_tokens :])
    rows = [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))]
    drafts = Drafts(tokens)
    grammar = _Grammar(llama_cpp, vocab, rules, n_vocab)
    out: list[int] = []
    proposed: list[int] = []  # the draft whose tokens the context holds after the last choice
    used = drafted = 0
    try:
        while len(out) < max_tokens and not stop_now():
            logits = penalised(rows[used], out[-PENALTY_WINDOW:], penalty)
            token = int(np.argmax(logits))
            if not grammar.allows(token):
                token = grammar.best_allowed(logits)
            grammar.accept(token)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                break
            out.append(token)
            drafts.add(token)
            if used < len(proposed) and proposed[used] == token:
                used += 1  # the context holds it already, and the logits after it
                drafted += 1
                continue
            # The context holds exactly what was chosen before this token.
            llm.n_tokens = len(tokens) + len(out) - 1
            proposed = drafts.draft(min(draft_tokens, max_tokens - len(out)))
            rows = _evaluate(llm, [token, *proposed], n_vocab)
            used = 0
    finally:
        grammar.close()
        llm.n_tokens = min(llm.n_tokens, len(tokens) + len(out))  # no draft left unchosen
    return llm.detokenize(out).decode("utf-8", errors="replace"), len(out), drafted
