"""The embedded local model: llama.cpp in process with Qwen2.5-Coder-1.5B-Instruct (GGUF).

One completion at a time. llama.cpp keeps the KV cache of the previous prompt and evaluates
only the new suffix, so a request that shares its prefix with the last one re-reads nothing;
that shared prefix is reported as cache-read tokens.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from nightowl.models.base import ModelConfigError, ModelReply, ModelRequest, Usage
from nightowl.models.chatml import read_reply, render
from nightowl.models.weights import weights_path

CONTEXT_TOKENS = 8192
FORCED_CALL = '<tool_call>\n{"name": "'


class LocalModel:
    """llama-cpp-python over the verified weights from `nightowl models install`."""

    def __init__(self, path: Path | None = None, threads: int = 1) -> None:
        self.name = "local:qwen2.5-coder-1.5b-instruct-q4_k_m"
        self._path = path or weights_path()
        self._threads = threads
        # Two contexts over the same (memory-mapped) weights: the conversations' own calls keep
        # their KV cache in "main"; the reviewer and the memory pass, whose prompts share
        # nothing with them, use "side" instead of evicting it.
        self._llms: dict[str, Any] = {}
        self._previous: dict[str, list[int]] = {"main": [], "side": []}
        self._lock = threading.Lock()

    def _load(self, slot: str) -> Any:
        if slot not in self._llms:
            try:
                from llama_cpp import Llama
            except ImportError as error:
                raise ModelConfigError(
                    "the local model needs llama-cpp-python: pip install 'nightowl[local]'"
                ) from error
            if not self._path.is_file():
                raise ModelConfigError(
                    f"no weights at {self._path}; run `nightowl models install` first"
                )
            self._llms[slot] = Llama(
                model_path=str(self._path),
                n_ctx=CONTEXT_TOKENS,
                n_threads=self._threads,
                verbose=False,
            )
        return self._llms[slot]

    def _complete(self, request: ModelRequest) -> ModelReply:
        slot = "side" if request.purpose in ("review", "memory") else "main"
        with self._lock:
            llm = self._load(slot)
            # A forced tool choice: small models call tools reliably when the reply is primed
            # with the call tag, and write valid JSON arguments. To end, they call
            # send_to_user with final=true (the system prompt says so).
            # A summary (compaction) is plain text; a warming call only reads the prefix.
            primer = FORCED_CALL if request.purpose in ("turn", "memory") else ""
            prompt = render(request) + primer
            tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
            budget = CONTEXT_TOKENS - len(tokens)
            if budget < 64:
                raise ModelConfigError(
                    f"the conversation ({len(tokens)} tokens) no longer fits the local model's "
                    f"{CONTEXT_TOKENS}-token context"
                )
            shared = 0
            for a, b in zip(tokens, self._previous[slot], strict=False):
                if a != b:
                    break
                shared += 1
            result = llm.create_completion(
                tokens,
                max_tokens=min(request.max_output_tokens, budget),
                temperature=0.0,
                stop=["<|im_end|>", "<|endoftext|>", "</tool_call>"],
            )
            generated = result["choices"][0]["text"]
            self._previous[slot] = tokens + llm.tokenize(
                generated.encode(), add_bos=False, special=True
            )
            if primer:
                private, calls = read_reply(
                    primer + generated,
                    {*request.tool_names, *(tool.name for tool in request.tools)},
                )
            else:
                private, calls = generated.strip(), []
            usage = result.get("usage", {})
            return ModelReply(
                text=private,
                tool_calls=tuple(calls),
                usage=Usage(
                    input_tokens=len(tokens) - shared,
                    cache_read_tokens=shared,
                    output_tokens=int(usage.get("completion_tokens", 0)),
                ),
                model=self.name,
            )

    async def complete(self, request: ModelRequest) -> ModelReply:
        return await asyncio.to_thread(self._complete, request)
