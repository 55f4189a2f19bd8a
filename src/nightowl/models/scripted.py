"""A deterministic model for tests and demos: replies read from a JSON script.

Script: `{"replies": [{"text": "...", "tool_calls": [{"name": ..., "arguments": {...}}],
"delay": 0.5, "usage": {...}}, ...], "then": "silent" | "repeat_last", "summary": "...",
"memory": [{"when": "text in the request", "tool_calls": [...]}, ...], "review": {"<tool>" |
"*": "ALLOW: ..." | "BLOCK: ..."}}`.

Reply *n* answers the conversation's *n*-th model call (counted from the request's history, a
compaction summary counting the replies it replaced, so a restart or a replay picks the same
reply); a reply `{"obey": true}` obeys injected text (tests). A compaction request is answered
with `summary`, a cache-warming one with nothing, a safety review from `review`. The memory
pass (requests with purpose "memory") gets the first "memory" reply whose "when" occurs in its
request, or an empty reply.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from nightowl.harness.transcript import ToolCall
from nightowl.models.base import ModelConfigError, ModelReply, ModelRequest, Usage
from nightowl.safety.review import REVIEW_SYSTEM_PREFIX, reviewed_tool

OBEY_MARK = "DO: "  # a reply `{"obey": true}` runs the tool calls outside text asks for


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
        if request.system.startswith(REVIEW_SYSTEM_PREFIX):
            return self._review(script, request)
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

    def _review(self, script: dict[str, Any], request: ModelRequest) -> ModelReply:
        """A safety review: the script's `review` maps a tool name (or "*") to its verdict."""
        verdicts: dict[str, str] = script.get("review") or {}
        tool = reviewed_tool(request)
        text = verdicts.get(tool) or verdicts.get("*") or "ALLOW: the scripted reviewer allows it"
        return ModelReply(text=text, usage=_usage(request, {}), model=self.name)

    def _reply(self, request: ModelRequest, reply: dict[str, Any], index: int) -> ModelReply:
        wanted = _obeyed(request) if reply.get("obey") else reply.get("tool_calls", ())
        calls = tuple(
            ToolCall(
                id=call.get("id") or f"call_{index}_{n}",
                name=call["name"],
                arguments=dict(call.get("arguments") or {}),
            )
            for n, call in enumerate(wanted)
        )
        return ModelReply(
            text=reply.get("text", ""),
            tool_calls=calls,
            usage=_usage(request, reply.get("usage", {})),
            model=self.name,
        )


def _obeyed(request: ModelRequest) -> list[dict[str, Any]]:
    """The worst case: every `DO: {tool call}` line that arrived since the model last spoke
    (from anyone: the owner, an e-mail, a web page), obeyed."""
    found: list[dict[str, Any]] = []
    for entry in reversed(request.messages):
        if entry.kind == "assistant":
            break
        lines = [line for line in entry.text.splitlines() if line.startswith(OBEY_MARK)]
        found = [json.loads(line[len(OBEY_MARK) :]) for line in lines] + found
    return found


def _usage(request: ModelRequest, given: dict[str, int]) -> Usage:
    """The script's usage if it gives one; otherwise a rough count (4 characters a token)."""
    if given:
        return Usage(**given)
    characters = len(request.system) + sum(len(e.text) for e in request.messages)
    return Usage(input_tokens=max(1, characters // 4), output_tokens=8)
