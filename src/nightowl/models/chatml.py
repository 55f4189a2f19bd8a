"""Qwen's ChatML prompt with tools, and a lenient reader of the tool calls small models write.

Pure functions: the local adapter renders requests with `render` and reads replies with
`read_reply`. Small models write a call as `<tool_call>{...}</tool_call>`, as a fenced JSON
block, or as a bare JSON object; all three are accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from nightowl.harness.prompt import ALWAYS_LOADED
from nightowl.harness.transcript import as_data, as_notice
from nightowl.messages import Entry, ModelRequest, ToolCall, ToolSpec

_TOOLS_PREAMBLE = """

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""


def _block(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def _schema_line(spec: ToolSpec) -> str:
    function = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    return json.dumps({"type": "function", "function": function}, ensure_ascii=False)


def _loaded_by_calls(messages: Sequence[Entry]) -> set[str]:
    """The tools a result in the history loaded (`load_tools`'s, or the answer to a call
    whose arguments did not fit), not those loaded from the start."""
    return {
        name
        for entry in messages
        if entry.kind == "tool_result"
        for name in entry.meta.get("loaded", ())
        if name not in ALWAYS_LOADED
    }


def _with_schemas(entry: Entry, specs: dict[str, ToolSpec], shown: set[str]) -> Entry:
    """A result that loaded tools with the schemas it loaded (those not shown before), inside the
    result itself, so a connector's schema stays fenced with what else it said."""
    new = [specs[name] for name in entry.meta.get("loaded", ()) if name in specs]
    new = [spec for spec in new if spec.name not in shown]
    if not new:
        return entry
    shown.update(spec.name for spec in new)
    lines = "\n".join(_schema_line(spec) for spec in new)
    return replace(entry, text=f"{entry.text}\n<tools>\n{lines}\n</tools>")


def _entry_text(entry: Entry) -> tuple[str, str]:
    if entry.kind == "user":
        return "user", as_data(entry, reminder=False)
    if entry.kind == "assistant":
        calls = "".join(
            "<tool_call>\n"
            + json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
            + "\n</tool_call>"
            for c in entry.tool_calls
        )
        return "assistant", (entry.text + ("\n" if entry.text and calls else "") + calls)
    if entry.kind == "tool_result":
        return "user", f"<tool_response>\n{as_data(entry, reminder=False)}\n</tool_response>"
    return "user", as_notice(entry, reminder=False)


def render(request: ModelRequest) -> str:
    """The whole request as one ChatML prompt, ending where the assistant speaks next.

    A tool the conversation loaded (`load_tools`, or a call that did not fit its schema) has
    its schema in that result, not in the system block: the system block stays the same for
    the whole conversation, so the local model never evaluates the history again after a
    load (with the schema in the system block, each load made it evaluate everything after
    the tool list once more, the whole history: about 20 s per 1,000 tokens on 2 cores, at
    50 tokens/s in batches)."""
    specs = {spec.name: spec for spec in request.tools}
    always = _always_shown(request)
    shown = {spec.name for spec in always}
    turns: list[tuple[str, str]] = []
    for entry in request.messages:
        if entry.kind == "tool_result" and entry.meta.get("loaded"):
            entry = _with_schemas(entry, specs, shown)
        role, text = _entry_text(entry)
        if turns and turns[-1][0] == role == "user":
            # Tool results, notes and messages that follow each other form one user turn.
            turns[-1] = (role, turns[-1][1] + "\n\n" + text)
        else:
            turns.append((role, text))
    blocks = [_system(request, always)] + [_block(role, text) for role, text in turns]
    return "".join(blocks) + "<|im_start|>assistant\n"


def _always_shown(request: ModelRequest) -> list[ToolSpec]:
    """The tools whose schemas the system block holds: those no result in the history loaded."""
    loaded = _loaded_by_calls(request.messages)
    return [spec for spec in request.tools if spec.name not in loaded]


def system_block(request: ModelRequest) -> str:
    """The prompt's first block: instructions, catalogue, memory and the schemas of the
    tools loaded from the start. A conversation's pinned prefix, the same at every call (the
    local model saves its state)."""
    return _system(request, _always_shown(request))


def _system(request: ModelRequest, tools: Sequence[ToolSpec]) -> str:
    lines = "\n".join(_schema_line(spec) for spec in tools)
    system = request.system + (_TOOLS_PREAMBLE.format(tools=lines) if tools else "")
    return _block("system", system)


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def _objects(text: str) -> list[str]:
    """Balanced top-level `{...}` spans in `text`."""
    spans, depth, start, in_string, escaped = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _as_call(raw: str, n: int, tagged: bool) -> ToolCall | None:
    try:
        # strict=False: a line break written as itself inside a string (a poem's lines) is
        # what the model meant, not a reason to drop the call.
        data: Any = json.loads(raw, strict=False)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    if not tagged and "arguments" not in data and "parameters" not in data:
        return None  # prose that merely mentions a name is not a call
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, strict=False)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ToolCall(id=f"call_{n}", name=data["name"], arguments=arguments)


def read_reply(text: str, known_tools: set[str]) -> tuple[str, list[ToolCall]]:
    """Split a completion into private text and the tool calls it contains.

    `known_tools` are every tool the model may name (loaded or not): a call to a tool it has
    not loaded yet is still a call, and the registry answers it with what to do.
    """
    candidates = [m.group(1) for m in _TAGGED.finditer(text)]
    tagged = bool(candidates)
    if not candidates:
        candidates = [m.group(1) for m in _FENCED.finditer(text)] or _objects(text)
    calls: list[ToolCall] = []
    private = _TAGGED.sub("", _FENCED.sub("", text))
    for raw in candidates:
        for span in _objects(raw) or [raw]:
            call = _as_call(span, len(calls), tagged)
            if call is not None and call.name in known_tools:
                calls.append(call)
                private = private.replace(span, "")
    return (private.strip() if calls else text.strip()), calls
