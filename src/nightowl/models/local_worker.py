"""The local model's own process: llama.cpp behind JSON lines on stdin and stdout.

Run as `python -m nightowl.models.local_worker --weights PATH --threads N [--state-dir DIR]`
by the server's `ModelProcess` (models/model_process.py), never by hand. Native code that
crashes (a build for another CPU, a bad instruction) takes down this process only; the server
fails that one call and starts a fresh worker for the next.

The protocol, one JSON object per line:
- in:  `{"id": 7, "slot": "main", "prompt": "<ChatML text>", "max_tokens": 2048,
  "prefix_chars": 5120, "call_schema": {...}}`, one completion (`prefix_chars`: where the
  prompt's pinned prefix ends, whose evaluated state is saved and reused; `max_tokens` 0 only
  evaluates that prefix, to warm it; `call_schema`, optional: the JSON Schema the completion is
  held to, through a llama.cpp grammar — models/call_schema.py); `{"cancel": 7}` stops
  request 7 at its next token (or skips it if not started).
- out: `{"id": 7, "text": "...", "prompt_tokens": 5000, "cached_tokens": 4800,
  "output_tokens": 40}`, or `{"id": 7, "error": "context" | "config" | "cancelled" |
  "failed", "message": "..."}`.
Requests run one at a time, in order. End of input (the server closed the pipe, or died)
ends the process at once, even mid-generation. (Not PR_SET_PDEATHSIG: Linux sends that when
the server's *thread* that started the worker ends, and the server starts it from a pool.)
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import queue
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from nightowl.models.call_schema import grammar_rules, loosened
from nightowl.models.held_decoding import generate_held
from nightowl.models.prefix_states import PrefixStates, capture, restore

CONTEXT_TOKENS = 8192
STOP = ["<|im_end|>", "<|endoftext|>", "</tool_call>"]
# The model's own recommended repetition penalty (Qwen2.5's generation config): greedy decoding
# without it fell into a loop ("They are the owls of the night, and ...") until the token limit,
# five minutes on one busy core. The grammar keeps a call's JSON intact whatever it penalises.
REPEAT_PENALTY = 1.1


class RequestError(Exception):
    """A request this worker cannot answer; `kind` is the protocol's error kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Slots:
    """Two llama.cpp contexts over the same memory-mapped weights, each with its KV cache.

    The conversations' own calls keep their cache in "main"; the reviewer and the memory pass,
    whose prompts share nothing with them, use "side" instead of evicting it. A context keeps
    the KV cache of what it evaluated last and evaluates only what a prompt adds to it; a
    prompt's pinned prefix (`prefix_chars`: the system block, the same for every conversation
    of a user) starts from a saved state when the context holds something else
    (models/prefix_states.py). What was not evaluated again is what a reply reports as cached.
    """

    def __init__(self, weights: Path, threads: int, state_dir: Path | None = None) -> None:
        self._weights = weights
        self._threads = threads
        self._state_dir = state_dir
        self._llms: dict[str, Any] = {}
        self._grammars: dict[str, str] = {}  # by the schema's JSON: a user's tools rarely change
        self.states: PrefixStates | None = None

    def _load(self, slot: str) -> Any:
        if slot not in self._llms:
            try:
                import llama_cpp
                from llama_cpp import Llama
            except ImportError as error:
                raise RequestError(
                    "config",
                    "the local model needs llama-cpp-python: pip install 'nightowl[local]'",
                ) from error
            if not self._weights.is_file():
                raise RequestError(
                    "config", f"no weights at {self._weights}; run `nightowl models install`"
                )
            self._llms[slot] = Llama(
                model_path=str(self._weights),
                n_ctx=CONTEXT_TOKENS,
                n_threads=self._threads,
                n_threads_batch=self._threads,
                verbose=False,
            )
            if self.states is None:
                found = self._weights.stat()
                identity = (
                    f"llama-cpp-python {llama_cpp.__version__}; {self._weights.resolve()} "
                    f"{found.st_size} {found.st_mtime_ns}; n_ctx {CONTEXT_TOKENS}"
                )
                self.states = PrefixStates(identity, self._state_dir)
        return self._llms[slot]

    def _start_from_prefix(self, llm: Any, prefix: list[int], save: bool) -> int:
        """Make `llm`'s context hold `prefix` (it holds a part of it, or something else) from
        a saved state; else, when `save`, evaluate it and save its state. The tokens of the
        prompt that need no evaluation now."""
        held = _common(prefix, llm.input_ids[: llm.n_tokens].tolist())
        assert self.states is not None
        state = self.states.find(prefix)
        if state is not None:
            restore(llm, state)
            return len(prefix)
        if save:
            llm.n_tokens = held  # eval drops the KV cache past this point first
            llm.eval(prefix[held:])
            self.states.save(capture(llm))
        return held

    def _grammar(self, schema: dict[str, Any]) -> str:
        """The llama.cpp grammar (GBNF) that holds a completion to `schema`."""
        key = json.dumps(schema)
        if key not in self._grammars:
            try:
                rules = grammar_rules(schema)
            except Exception as error:  # the converter refuses a schema it cannot express
                print(f"local worker: a tool schema has no grammar ({error})", file=sys.stderr)
                rules = grammar_rules(loosened(schema))  # still a well-formed call
            if len(self._grammars) >= 16:
                self._grammars.clear()
            self._grammars[key] = rules
        return self._grammars[key]

    def complete(
        self,
        slot: str,
        prompt: str,
        max_tokens: int,
        stop_now: Callable[[], bool],
        prefix_chars: int = 0,
        call_schema: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One completion of `prompt` in `slot`: the reply line's fields (without the id).
        `max_tokens` 0 only makes the context hold the prompt's prefix (warming);
        `call_schema` holds the completion to that JSON Schema."""
        if slot not in ("main", "side"):
            raise RequestError("failed", f"unknown slot {slot!r}")
        llm = self._load(slot)
        tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        budget = CONTEXT_TOKENS - len(tokens)
        if budget < 64:
            raise RequestError(
                "context",
                f"the conversation ({len(tokens)} tokens) no longer fits the local model's "
                f"{CONTEXT_TOKENS}-token context",
            )
        shared = _common(tokens, llm.input_ids[: llm.n_tokens].tolist())
        if 0 < prefix_chars <= len(prompt):
            prefix = llm.tokenize(prompt[:prefix_chars].encode(), add_bos=False, special=True)
            # Only a prefix that tokenizes the same on its own (it ends at a special token).
            usable = tokens[: len(prefix)] == prefix and (
                len(prefix) < len(tokens) or max_tokens == 0
            )
            if usable and shared < len(prefix):
                # Saved only where a conversation starts (no reply of the model after the
                # prefix yet, or warming): later in a conversation the same prefix is in the
                # saved states already.
                first = prompt.count("<|im_start|>assistant", prefix_chars) <= 1
                shared = max(shared, self._start_from_prefix(llm, prefix, save=first))
        if max_tokens == 0:
            return {
                "text": "",
                "prompt_tokens": len(tokens),
                "cached_tokens": shared,
                "output_tokens": 0,
            }
        limit = min(max_tokens, budget)
        if call_schema:
            held = _common(tokens, llm.input_ids[: llm.n_tokens].tolist())
            rules = self._grammar(call_schema)
            text, written, _drafted = generate_held(
                llm, tokens, held, rules, limit, REPEAT_PENALTY, stop_now
            )
        else:
            from llama_cpp import StoppingCriteriaList

            result = llm.create_completion(
                tokens,
                max_tokens=limit,
                temperature=0.0,
                repeat_penalty=REPEAT_PENALTY,
                stop=STOP,
                stopping_criteria=StoppingCriteriaList([lambda _ids, _logits: stop_now()]),
            )
            text = result["choices"][0]["text"]
            written = int(result.get("usage", {}).get("completion_tokens", 0))
        return {
            "text": text,
            "prompt_tokens": len(tokens),
            "cached_tokens": shared,
            "output_tokens": written,
        }


def _common(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` share from their start."""
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


class Inbox:
    """Reads stdin on a thread of its own, so a cancel reaches a generation in progress."""

    def __init__(self, stream: IO[bytes], on_end: Callable[[], None] = lambda: os._exit(0)) -> None:
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        self.cancelled: set[int] = set()
        self._stream = stream
        self._on_end = on_end
        threading.Thread(target=self._read, name="inbox", daemon=True).start()

    def _read(self) -> None:
        for raw in self._stream:
            try:
                message = json.loads(raw)
            except ValueError:
                print(f"local worker: a line of {len(raw)} bytes, not JSON", file=sys.stderr)
                continue
            if "cancel" in message:
                self.cancelled.add(message["cancel"])
            else:
                self.requests.put(message)
        # The server closed the pipe or died: nobody waits for an answer, stop at once.
        self._on_end()


def answer(slots: Slots, inbox: Inbox, request: dict[str, Any]) -> dict[str, Any]:
    """The reply line to one request (without its id): a completion, or an error."""
    request_id = request.get("id")
    try:
        if request_id in inbox.cancelled:
            raise RequestError("cancelled", "cancelled before it started")
        reply = slots.complete(
            str(request.get("slot", "main")),
            str(request["prompt"]),
            int(request.get("max_tokens", 2048)),
            lambda: request_id in inbox.cancelled,
            int(request.get("prefix_chars", 0)),
            request.get("call_schema") or None,
        )
        if request_id in inbox.cancelled:
            raise RequestError("cancelled", "cancelled while it ran")
        return reply
    except RequestError as error:
        return {"error": error.kind, "message": str(error)}
    except Exception as error:  # a bad request must not end the worker
        return {"error": "failed", "message": f"{type(error).__name__}: {error}"}
    finally:
        inbox.cancelled.discard(request_id)


def serve(slots: Slots, inbox: Inbox, out: IO[str]) -> None:
    """Answer requests one at a time, for as long as input lasts."""
    while True:
        request = inbox.requests.get()
        reply = answer(slots, inbox, request)
        out.write(json.dumps({"id": request.get("id"), **reply}) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments, keep stdout for the protocol only, serve."""
    parser = argparse.ArgumentParser(description="nightowl's local model process")
    parser.add_argument("--weights", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--state-dir", type=Path, default=None, help="saved prefix states")
    args = parser.parse_args(argv)
    # The protocol gets its own copy of stdout; anything native code prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    faulthandler.enable()  # a crash leaves a Python stack on stderr for the server's log
    serve(Slots(args.weights, args.threads, args.state_dir), Inbox(sys.stdin.buffer), out)


if __name__ == "__main__":
    main()
