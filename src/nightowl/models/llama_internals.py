"""Where nightowl goes beneath llama-cpp-python's `Llama` class, in one place (written against
0.3.36, pinned < 0.4 in pyproject.toml).

Held decoding (models/held_decoding.py) checks a drafted continuation in one pass and needs the
logits after each of its tokens; `Llama.eval` asks llama.cpp for the last token's only (all of
them only when the whole `Llama` is built with `logits_all=True`, which then copies every
token's logits of every evaluation into `Llama.scores`). Saved prefixes
(models/prefix_states.py) put a context's state back and must make the next generation
evaluate again: its logits are not a live decode's.

Private things used, and what replaced them:
- `Llama._ctx.kv_cache_seq_rm(-1, n_past, -1)`, `Llama._batch.set_batch(batch, n_past,
  logits_all=True)` and `Llama._ctx.decode(Llama._batch)` (llama-cpp-python's private wrappers
  of the context and of its batch): replaced by `decode_with_all_logits`, which makes the same
  llama.cpp calls through the library's public low-level bindings of llama.h
  (`llama_memory_seq_rm` on `llama_get_memory(Llama.ctx)`, `llama_batch_init`,
  `llama_decode`, `llama_batch_free`), with a batch of its own filled as `set_batch` fills the
  library's. Would be simpler with: a public `Llama.eval(tokens, logits_all=True)`.
- `Llama._ctx.ctx` (prefix_states): replaced by the public `Llama.ctx` property.
- `Llama._requires_eval = True` after a restore (prefix_states): replaced by `Llama.reset()`
  before the state is put back (the library's own `load_state` and `reset` set it; `reset`
  also clears a recurrent model's memory, which the restored state then replaces).
  Would be simpler with: a public way to load a state without `load_state`'s copies of
  `scores` (rows of the vocabulary's size per token).

tests/models/test_llama_internals.py checks, without weights, that what this relies on is still
there with the expected shape, and says what to do when not.
"""

from __future__ import annotations

from typing import Any


def decode_with_all_logits(llm: Any, batch: list[int]) -> None:
    """Evaluate `batch` right after `llm`'s first `llm.n_tokens` tokens (dropping its KV cache
    past them first), keeping the logits after every token of it (`llama_get_logits_ith`).
    Leaves `llm`'s own record of its context (`input_ids`, `n_tokens`) to the caller."""
    import llama_cpp

    n_past = llm.n_tokens
    memory = llama_cpp.llama_get_memory(llm.ctx)
    if memory is None:
        raise RuntimeError("the llama.cpp context has no memory")
    llama_cpp.llama_memory_seq_rm(memory, 0, n_past, -1)
    decoded = llama_cpp.llama_batch_init(len(batch), 0, 1)
    try:
        decoded.n_tokens = len(batch)
        for i, token in enumerate(batch):
            decoded.token[i] = token
            decoded.pos[i] = n_past + i
            decoded.seq_id[i][0] = 0
            decoded.n_seq_id[i] = 1
            decoded.logits[i] = True
        returned = llama_cpp.llama_decode(llm.ctx, decoded)
        if returned != 0:
            raise RuntimeError(f"llama_decode returned {returned}")
    finally:
        llama_cpp.llama_batch_free(decoded)
