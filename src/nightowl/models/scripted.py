"""A deterministic model for tests and demos: replies read from a JSON script.

Script: `{"replies": [{"text": "...", "tool_calls": [{"name": ..., "arguments": {...}}],
"delay": 0.5, "usage": {...}}, ...], "then": "silent" | "repeat_last", "summary": "...",
"memory": [{"when": "text in the request", "tool_calls": [...]}, ...]}`. Reply *n* answers the
conversation's *n*-th model call (counted from the request's history, a compaction summary
counting the replies it replaced, so a restart or a replay picks the same reply). A compaction
request is answered with `summary`; a cache-warming one with nothing. The memory pass (requests
with purpose "memory") gets the first "memory" reply whose "when" occurs in its request, or an
empty reply.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from nightowl.harness.transcript import ToolCall
from nightowl.models.base import ModelConfigError, ModelReply, ModelRequest, Usage


class ScriptedModel:
    """Answers from a script; `delay` seconds per reply simulate a slow provider."""

    def __init__(self, script_path: Path) -> None:
        self.name = f"scripted:{script_path}"
        self._path = script_path

    def _script(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self._path.read_text())
        except (OSError, ValueError) as error:
            raise ModelConfigError(f"cannot read the model script {self._path}: {error}") from error
        if not isinstance(data.get("replies"), list):
            raise ModelConfigError(f"{self._path}: expected an object with a 'replies' list")
        return data

    async def complete(self, request: ModelRequest) -> ModelReply:
        script = self._script()
        if request.purpose == "memory":
            return self._memory_reply(script, request)
        replies: list[dict[str, Any]] = script["replies"]
        if request.purpose == "warm":
            return ModelReply(model=self.name, usage=_usage(request, {}))
        if request.purpose == "compaction":
            summary = str(script.get("summary") or "Summary: the conversation so far.")
            return ModelReply(text=summary, model=self.name, usage=_usage(request, {}))
        index = sum(
            int(entry.meta.get("replaced_replies", 0)) + (entry.kind == "assistant")
            for entry in request.messages
        )
        if index >= len(replies):
            if script.get("then") != "repeat_last" or not replies:
                return ModelReply(model=self.name, usage=_usage(request, {}))
            index = len(replies) - 1
        reply = replies[index]
        if reply.get("delay"):
            await asyncio.sleep(float(reply["delay"]))
        return self._reply(request, reply, index)

    def _memory_reply(self, script: dict[str, Any], request: ModelRequest) -> ModelReply:
        # The memory pass's replies: the first whose "when" occurs in the request's text.
        text = "\n".join(entry.text for entry in request.messages)
        for reply in script.get("memory", ()):
            if str(reply.get("when", "")) in text:
                return self._reply(request, reply, 0)
        return ModelReply(model=self.name, usage=_usage(request, {}))

    def _reply(self, request: ModelRequest, reply: dict[str, Any], index: int) -> ModelReply:
        calls = tuple(
            ToolCall(
                id=call.get("id") or f"call_{index}_{n}",
                name=call["name"],
                arguments=dict(call.get("arguments") or {}),
            )
            for n, call in enumerate(reply.get("tool_calls", ()))
        )
        return ModelReply(
            text=reply.get("text", ""),
            tool_calls=calls,
            usage=_usage(request, reply.get("usage", {})),
            model=self.name,
        )


def _usage(request: ModelRequest, given: dict[str, int]) -> Usage:
    """The script's usage if it gives one; otherwise a rough count (4 characters a token)."""
    if given:
        return Usage(**given)
    characters = len(request.system) + sum(len(e.text) for e in request.messages)
    return Usage(input_tokens=max(1, characters // 4), output_tokens=8)
