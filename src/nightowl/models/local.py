"""The embedded local model: Qwen2.5-Coder-1.5B-Instruct (GGUF) on llama.cpp, in a process
of its own.

This adapter renders the ChatML prompt and reads the tool calls out of the reply; the
llama.cpp work (two contexts, the KV cache, the context-size check) runs in
`nightowl.models.local_worker`, supervised by a `ModelProcess`: a crash there fails one call
with a retryable `ModelCrashed`, never the server. One completion at a time; the prefix a
request shares with the previous one in its context is reported as cache-read tokens.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nightowl.messages import ModelReply, ModelRequest, Usage
from nightowl.models.base import ModelConfigError, ModelError
from nightowl.models.call_schema import call_schema
from nightowl.models.chatml import read_reply, render, system_block
from nightowl.models.model_process import ModelProcess
from nightowl.models.weights import cache_dir, weights_path

FORCED_CALL = "<tool_call>\n"
DEFAULT_IDLE_S = 300.0
# Left to itself the model leaves send_to_user's `final` out (false), is called again, and
# sends its answer a second time: it must say whether the message ends the turn.
MUST_WRITE = {"send_to_user": ("final",)}


def available_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit included)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def worker_command(path: Path, threads: int, state_dir: Path | None = None) -> list[str]:
    """The command that runs the real worker over the weights at `path`; it saves the
    states of evaluated prompt prefixes in `state_dir` (models/prefix_states.py)."""
    command = [
        sys.executable,
        "-m",
        "nightowl.models.local_worker",
        "--weights",
        str(path),
        "--threads",
        str(threads),
    ]
    if state_dir is not None:
        command += ["--state-dir", str(state_dir)]
    return command


class LocalModel:
    """The verified weights from `nightowl models install`, answered by a child process.

    `command` replaces the worker's command line (tests run a scripted stand-in that speaks
    the same protocol); `idle_s` is how long the process lives without a call; `threads`
    (0: every core this process may use) run llama.cpp.
    """

    keeps_prefix_states = True  # a prefix-only request warms a new conversation's start
    prompt_style = "small"  # short instructions, little work log (harness/prompt.py)

    def __init__(
        self,
        path: Path | None = None,
        threads: int = 0,
        *,
        idle_s: float = DEFAULT_IDLE_S,
        command: Sequence[str] | None = None,
    ) -> None:
        self.name = "local:qwen2.5-coder-1.5b-instruct-q4_k_m"
        self.process = ModelProcess(
            command
            or worker_command(
                path or weights_path(), threads or available_cores(), cache_dir() / "kv"
            ),
            idle_s,
            what="the local model",
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        # The reviewer and the memory pass share no prefix with the conversation: their own
        # context ("side") keeps them from evicting its KV cache ("main").
        slot = "side" if request.purpose in ("review", "judge", "memory") else "main"
        # A forced tool choice: the reply is primed with the call tag and its decoding held
        # to the JSON Schema of one call of a tool the model may name (a llama.cpp grammar),
        # so every reply is a well-formed call. To end, the model calls send_to_user with
        # final=true (the system prompt says so). A summary (compaction) is plain text; a
        # warming call only reads the prefix.
        forced = request.purpose in ("turn", "helper", "memory") and bool(
            request.tools or request.tool_names
        )
        primer = FORCED_CALL if forced else ""
        call: dict[str, object] = {
            "slot": slot,
            "prompt": render(request) + primer,
            "max_tokens": request.max_output_tokens,
            # The pinned prefix: its evaluated state is saved and reused.
            "prefix_chars": len(system_block(request)),
        }
        if forced:
            call["call_schema"] = call_schema(request.tools, request.tool_names, MUST_WRITE)
        answer = await self.process.call(call)
        if "error" in answer:
            message = str(answer.get("message", answer["error"]))
            if answer["error"] in ("context", "config"):
                raise ModelConfigError(message)
            raise ModelError(f"the local model failed: {message}")
        generated = str(answer.get("text", ""))
        if primer:
            private, calls = read_reply(
                primer + generated,
                {*request.tool_names, *(tool.name for tool in request.tools)},
            )
        else:
            private, calls = generated.strip(), []
        prompt_tokens = int(answer.get("prompt_tokens", 0))
        shared = int(answer.get("cached_tokens", 0))
        return ModelReply(
            text=private,
            tool_calls=tuple(calls),
            usage=Usage(
                input_tokens=prompt_tokens - shared,
                cache_read_tokens=shared,
                output_tokens=int(answer.get("output_tokens", 0)),
            ),
            model=self.name,
        )

    def close(self) -> None:
        """Stop the model's process (the server does this when it stops)."""
        self.process.close()
