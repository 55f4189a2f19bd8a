"""Anthropic's Messages API through the official SDK, with prompt-cache breakpoints.

Breakpoints: after the system prompt (tools + system, stable until compaction), after the
conversation's first message (stable too), and on the newest message (so the growing history
is written to the cache and read back by the next call).
"""

from __future__ import annotations

from typing import Any

import anthropic

from nightowl.harness.notes import NOTE_META
from nightowl.harness.transcript import as_data, as_notice
from nightowl.messages import Entry, ModelReply, ModelRequest, ToolCall, Usage
from nightowl.models.provider_errors import classify

_CACHE = {"type": "ephemeral"}


def _content(entry: Entry) -> tuple[str, list[dict[str, Any]]]:
    if entry.kind == "assistant":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": entry.text}] if entry.text else []
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
            for c in entry.tool_calls
        ]
        return "assistant", blocks
    if entry.kind == "tool_result":
        return "user", [
            {
                "type": "tool_result",
                "tool_use_id": entry.call_id,
                "content": as_data(entry),
                "is_error": entry.is_error,
            }
        ]
    text = as_notice(entry) if entry.kind == "notice" else as_data(entry)
    return "user", [{"type": "text", "text": text}]


def to_messages(entries: tuple[Entry, ...]) -> list[dict[str, Any]]:
    """Entries as Anthropic messages (roles alternate) with cache breakpoints placed: after the
    first message (the stable prefix) and where the next request stops repeating this one: at
    the end, or before a newest note the history will not keep (one a kept note is not:
    harness/notes.py)."""
    messages: list[dict[str, Any]] = []
    ends: list[tuple[int, int]] = []  # (message, block) where each sent entry's blocks end
    last: Entry | None = None
    for entry in entries:
        role, blocks = _content(entry)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": list(blocks)})
        ends.append((len(messages) - 1, len(messages[-1]["content"]) - 1))
        last = entry
    if not messages:
        return messages
    passing = last is not None and last.kind == "notice" and NOTE_META not in last.meta
    newest_is_note = len(ends) > 1 and passing
    for where in {(0, len(messages[0]["content"]) - 1), ends[-2] if newest_is_note else ends[-1]}:
        block = messages[where[0]]["content"][where[1]]
        messages[where[0]]["content"][where[1]] = {**block, "cache_control": _CACHE}
    return messages


class AnthropicModel:
    """Claude models via `anthropic.AsyncAnthropic` (retries are the turn step's job)."""

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None):
        self.name = f"anthropic:{model}"
        self._model = model
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=120.0
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        try:
            response = await self._client.messages.create(
                model=self._model,
                max_tokens=request.max_output_tokens,  # 1 for a warming call
                system=[{"type": "text", "text": request.system, "cache_control": _CACHE}],  # type: ignore[typeddict-item]
                tools=tools,  # type: ignore[arg-type]
                messages=to_messages(request.messages),  # type: ignore[arg-type]
            )
        except anthropic.APIStatusError as error:
            raise classify(error.status_code, "Anthropic", error.message) from error
        except anthropic.APIError as error:  # connection problems and timeouts
            raise classify(None, "Anthropic", str(error)) from error
        text = "".join(b.text for b in response.content if b.type == "text")
        calls = tuple(
            ToolCall(id=b.id, name=b.name, arguments=dict(b.input))  # type: ignore[arg-type]
            for b in response.content
            if b.type == "tool_use"
        )
        usage = response.usage
        return ModelReply(
            text=text,
            tool_calls=calls,
            usage=Usage(
                input_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
                output_tokens=usage.output_tokens,
            ),
            model=self.name,
        )
