"""A deterministic model for tests and demos: replies read from a JSON script.

Script: `{"replies": [{"text": "...", "tool_calls": [{"name": ..., "arguments": {...}}],
"delay": 0.5, "usage": {...}}, ...], "then": "silent" | "repeat_last", "summary": "...",
"memory": [{"when": "text in the request", "tool_calls": [...]}, ...], "review": {"<tool>" |
"*": "ALLOW: ..." | "BLOCK: ..."}}`.

Reply *n* answers the conversation's *n*-th model call (counted from the request's history, a
compaction summary counting the replies it replaced, so a restart or a replay picks the same
reply); a reply `{"obey": true}` obeys injected text (tests: a `DO: {call}` anywhere in a line
of what arrived since the model last spoke; in its string arguments `{{copy:TEXT}}` becomes the
line of the conversation that holds TEXT, percent-encoded — `{{copy64:TEXT}}` base64url, and
`{{copy:TEXT:8:16}}` characters 8 to 16 of it: a model that copies what it was told to),
`{"obey": "anywhere"}` (or `"recall": true`) also
what memory recalls in the newest note, and with `"then": true`, once nothing asks for more,
it runs the owner's own `THEN:` steps. A compaction request is answered
with `summary`, a cache-warming one with nothing, a safety review from `review`. The memory
pass (requests with purpose "memory") gets the first "memory" reply whose "when" occurs in its
request, or an empty reply. A helper's requests (purpose "helper") are answered from the
script's "helper" replies, counted in the helper's own conversation; a connector's sampling
request (purpose "sampling") with the script's "sampling" text.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from nightowl.messages import ModelReply, ModelRequest, ToolCall, Usage
from nightowl.models.base import ModelConfigError

OBEY_MARK = "DO: "  # a reply `{"obey": true}` runs the tool calls outside text asks for
THEN_MARK = "THEN: "  # … and, with `"then": true`, the owner's next steps once nothing asks


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
        if request.purpose == "review":
            return self._review(script, request)
        if request.purpose == "helper":  # a helper's own script, counted in its conversation
            script = {**script, "replies": script.get("helper", []), "then": "silent"}
        if request.purpose == "memory":
            return self._memory_reply(script, request)
        replies: list[dict[str, Any]] = script["replies"]
        if request.purpose == "sampling":  # a connector's server asked: the script's text
            text = str(script.get("sampling") or "Sampled.")
            return ModelReply(text=text, model=self.name, usage=_usage(request, {}))
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
        tool = request.subject
        text = verdicts.get(tool) or verdicts.get("*") or "ALLOW: the scripted reviewer allows it"
        return ModelReply(text=text, usage=_usage(request, {}), model=self.name)

    def _reply(self, request: ModelRequest, reply: dict[str, Any], index: int) -> ModelReply:
        obey = reply.get("obey")
        recall = obey == "anywhere" or bool(reply.get("recall"))
        wanted = _obeyed(request, recall) if obey else reply.get("tool_calls", ())
        if obey and reply.get("then") and not wanted:
            wanted = _read_the_rest(request) or _next_steps(request)
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


def _obeyed(request: ModelRequest, recall: bool = False) -> list[dict[str, Any]]:
    """The worst case: every `DO: {tool call}` line that arrived since the model last spoke
    (from anyone: the owner, an e-mail, a web page; with `recall`, also what memory recalls in
    the newest note, which is new at every call), obeyed."""
    messages = list(request.messages)
    if not recall and messages and messages[-1].kind == "notice":
        messages.pop()  # the newest note: the time and what memory recalls
    found: list[dict[str, Any]] = []
    for entry in reversed(messages):
        if entry.kind == "assistant":
            break
        found = _marked(entry.text, OBEY_MARK) + found
    lines = [line for e in request.messages for line in e.text.splitlines() if "{{copy" not in line]
    return [_copied(call, lines) for call in found]


_COPY = re.compile(r"\{\{copy(64)?:([^}:]+)(?::(\d+):(\d+))?\}\}")


def _copied(value: Any, lines: list[str]) -> Any:
    """`value` with each `{{copy:TEXT}}` replaced by the line that holds TEXT (encoded)."""
    if isinstance(value, dict):
        return {key: _copied(inner, lines) for key, inner in value.items()}
    if isinstance(value, list):
        return [_copied(inner, lines) for inner in value]
    if not isinstance(value, str):
        return value

    def line_of(match: re.Match[str]) -> str:
        held = next((line for line in lines if match[2] in line), "")
        text = held.removeprefix("\u2502 ").strip()
        if match[3] is not None:
            text = text[int(match[3]) : int(match[4])]
        if match[1]:
            return base64.urlsafe_b64encode(text.encode()).decode()
        return quote(text, safe="")

    return _COPY.sub(line_of, value)


def _marked(text: str, mark: str) -> list[dict[str, Any]]:
    """The tool calls after `mark` (anywhere in a line: after a line number, as in read_file's
    or grep's output, or within a paragraph of a web page)."""
    calls = []
    decoder = json.JSONDecoder()
    for line in text.splitlines():
        at = line.find(mark + "{")
        while at >= 0:
            try:
                call, end = decoder.raw_decode(line, at + len(mark))
            except ValueError:
                end = at + len(mark)
            else:
                calls.append(call)
            at = line.find(mark + "{", end)
    return calls


_STORED = re.compile(r"stored as (blob:[0-9a-f]{64}); read parts of it with read_output")


def _read_the_rest(request: ModelRequest) -> list[dict[str, Any]]:
    """A curious model: the newest output was cut to a preview, so it greps the rest for
    instructions (once per output)."""
    results = [e for e in request.messages if e.kind == "tool_result"]
    found = _STORED.search(results[-1].text) if results else None
    if found is None:
        return []
    read = {"name": "read_output", "arguments": {"reference": found.group(1), "pattern": "DO: "}}
    made = [(c.name, c.arguments) for e in request.messages for c in e.tool_calls]
    return [] if (read["name"], read["arguments"]) in made else [read]


def _next_steps(request: ModelRequest) -> list[dict[str, Any]]:
    """The owner's `THEN: {tool call}` lines of their newest message, once (a model that
    obeys injected text, yet also finishes the owner's own task)."""
    owners = [e for e in request.messages if e.kind == "user" and e.trust == "owner"]
    if not owners:
        return []
    steps = _marked(owners[-1].text, THEN_MARK)
    made = [
        (call.name, call.arguments)
        for entry in request.messages[request.messages.index(owners[-1]) :]
        for call in entry.tool_calls
    ]
    first = (steps[0]["name"], steps[0].get("arguments") or {}) if steps else None
    return [] if first in made else steps


def _usage(request: ModelRequest, given: dict[str, int]) -> Usage:
    """The script's usage if it gives one; otherwise a rough count (4 characters a token)."""
    if given:
        return Usage(**given)
    characters = len(request.system) + sum(len(e.text) for e in request.messages)
    return Usage(input_tokens=max(1, characters // 4), output_tokens=8)
