"""Held decoding on the local model, with drafts from the context and without (same process,
same prompts): how much prompt-lookup drafts save, and whether they change the text.

Each prompt is a call the local model writes in a conversation: a short answer, a poem, a
quote from a page the prompt holds, a note to keep. Each is decoded with `draft_tokens=0`
(one token per pass) and with the default drafts, from the same KV state.

Prints one JSON object: per prompt the tokens, seconds both ways and the tokens that came from
accepted drafts; `tokens_per_s_one_by_one`, `tokens_per_s_drafted`, `speedup` (the ratio) and
`same_text` (true when every prompt gave the same text both ways).
"""

from __future__ import annotations

import json
import os
import sys
import time

from common import ROOT

sys.path.insert(0, str(ROOT / "src"))

from nightowl.models.call_schema import call_schema, grammar_rules
from nightowl.models.held_decoding import DRAFT_TOKENS, generate_held
from nightowl.models.local_worker import CONTEXT_TOKENS, REPEAT_PENALTY
from nightowl.models.weights import weights_path
from nightowl.tools.builtin import builtin_registry

SYSTEM = (
    "You are nightowl, an assistant that works for its owner. The owner sees only what you "
    'send with the send_to_user tool: {"name": "send_to_user", "arguments": {"text": '
    '"<your answer>", "final": true}}. When the owner asks you to do something, call the tool '
    "that does it first, then tell the owner what happened."
)
PAGE = (
    "Cafe Lune. Today's soup: roasted tomato with basil. Opening hours: 8 am to 6 pm, closed "
    "on Mondays. The terrace opens when it is warmer than 15 degrees."
)
PROMPTS = {
    "answer": "What is the capital of France?",
    "poem": "Write a three-line poem about owls.",
    "quote": f"Here is the cafe's page:\n{PAGE}\nQuote exactly what it says about the soup.",
    "note": "Please remember that I prefer meetings in the afternoon.",
}


def _prompt(text: str) -> str:
    return (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
    )


def main() -> None:
    from llama_cpp import Llama

    threads = int(os.environ.get("NIGHTOWL_LOCAL_MODEL_THREADS", "0")) or os.cpu_count() or 1
    llm = Llama(str(weights_path()), n_ctx=CONTEXT_TOKENS, n_threads=threads, verbose=False)
    specs = builtin_registry().specs()
    rules = grammar_rules(call_schema([specs["send_to_user"], specs["write_note"]], ["shell"]))
    results = {}
    totals = {"tokens": 0, "one_by_one_s": 0.0, "drafted_s": 0.0}
    same = True
    for name, text in PROMPTS.items():
        tokens = llm.tokenize(_prompt(text).encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(tokens)  # both runs start from the prompt held
        timings = {}
        texts = {}
        for label, draft in (("one_by_one", 0), ("drafted", DRAFT_TOKENS)):
            started = time.perf_counter()
            texts[label], written, drafted = generate_held(
                llm, tokens, len(tokens), rules, 200, REPEAT_PENALTY, lambda: False, draft
            )
            timings[label] = time.perf_counter() - started
        same = same and texts["one_by_one"] == texts["drafted"]
        results[name] = {
            "tokens": written,
            "drafted_tokens": drafted,
            "one_by_one_s": round(timings["one_by_one"], 2),
            "drafted_s": round(timings["drafted"], 2),
        }
        totals["tokens"] += written
        totals["one_by_one_s"] += timings["one_by_one"]
        totals["drafted_s"] += timings["drafted"]
    print(
        json.dumps(
            {
                "threads": threads,
                "prompts": results,
                "tokens_per_s_one_by_one": round(totals["tokens"] / totals["one_by_one_s"], 1),
                "tokens_per_s_drafted": round(totals["tokens"] / totals["drafted_s"], 1),
                "speedup": round(totals["one_by_one_s"] / totals["drafted_s"], 2),
                "same_text": same,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
