"""OpenAI's Chat Completions API, and any server that speaks it (vLLM, Ollama, llama.cpp).

The request keeps the prefix byte-identical from call to call, which is what OpenAI-style
automatic prefix caching needs; cached tokens are read from `prompt_tokens_details`.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from nightowl.harness.transcript import as_data, as_notice
from nightowl.messages import Entry, ModelReply, ModelRequest, ToolCall, Usage
from nightowl.models.chatml import read_reply
from nightowl.models.provider_errors import classify


def to_messages(system: str, entries: tuple[Entry, ...]) -> list[dict[str, Any]]:
    """Entries as Chat Completions messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for entry in entries:
        if entry.kind == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": entry.text or None}
            if entry.tool_calls:
                message["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                    }
                    for c in entry.tool_calls
                ]
            messages.append(message)
        elif entry.kind == "tool_result":
            messages.append(
                {"role": "tool", "tool_call_id": entry.call_id, "content": as_data(entry)}
            )
        elif entry.kind == "notice":
            messages.append({"role": "user", "content": as_notice(entry)})
        else:
            messages.append({"role": "user", "content": as_data(entry)})
    return messages


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {"_unparsed": raw}
    return value if isinstance(value, dict) else {"_unparsed": raw}


class OpenAIModel:
    """Chat models via `openai.AsyncOpenAI` (retries are the turn step's job)."""

    def __init__(
        self, model: str, api_key: str | None = None, base_url: str | None = None, name: str = ""
    ) -> None:
        self.name = name or f"openai:{model}"
        self._model = model
        self._client = openai.AsyncOpenAI(
            api_key=api_key or "not-needed", base_url=base_url, max_retries=0, timeout=120.0
        )

    async def complete(self, request: ModelRequest) -> ModelReply:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
        try:
            response = await self._client.chat.completions.create(
                model=self._model,
                messages=to_messages(request.system, request.messages),  # type: ignore[arg-type]
                tools=tools or openai.NOT_GIVEN,  # type: ignore[arg-type]
                max_tokens=request.max_output_tokens,
            )
        except openai.APIStatusError as error:
            raise classify(error.status_code, "The model server", error.message) from error
        except openai.APIError as error:
            raise classify(None, "The model server", str(error)) from error
        choice = response.choices[0].message
        text = choice.content or ""
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=_arguments(c.function.arguments))
            for c in (choice.tool_calls or [])
            if c.type == "function"
        ]
        if not calls and text:
            # Some compatible servers return calls as <tool_call> text; read them leniently.
            text, calls = read_reply(text, {*request.tool_names, *(t.name for t in request.tools)})
        usage = response.usage
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        cached = int(getattr(details, "cached_tokens", 0) or 0)
        return ModelReply(
            text=text,
            tool_calls=tuple(calls),
            usage=Usage(
                input_tokens=(usage.prompt_tokens - cached) if usage else 0,
                cache_read_tokens=cached,
                output_tokens=usage.completion_tokens if usage else 0,
            ),
            model=self.name,
        )
