"""Cache stability of the prompt over a long conversation, through the real harness.

A scripted 200-turn conversation (a user message, a tool call and its result, a reply per
turn) with 200 tools registered, a tool loaded every 20 turns, and one deploy halfway that
changes a tool's description. Every model request is assembled exactly as the turn workflow
does (pinned prompt, loaded schemas, newest note), hashed by section and metered.

Prints JSON: `cached_input_share` (the prefix-cache meter over all requests; target >= 0.95),
`unexplained_cache_breaks` (target 0), `tool_definition_tokens` (catalogue plus loaded schemas
in the last request; target < 3,000 and < 5% of `all_schemas_tokens`, every schema in full).
Not yet measured: compaction (not built), and the same run on the local model.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nightowl.harness.pins import pin_now, pinned_request  # noqa: E402
from nightowl.harness.prompt import SYSTEM_PROMPT, tool_catalogue  # noqa: E402
from nightowl.harness.sections import (  # noqa: E402
    CHARS_PER_TOKEN,
    find_cache_break,
    prompt_tokens,
    request_sections,
    shared_prefix_tokens,
)
from nightowl.harness.transcript import Entry, ToolCall  # noqa: E402
from nightowl.models.base import ToolSpec  # noqa: E402
from nightowl.tools.builtin import builtin_registry  # noqa: E402

TURNS = 200
TOOLS = 200
DOMAINS = [
    "calendar",
    "mail",
    "notes",
    "files",
    "tasks",
    "crm",
    "billing",
    "issues",
    "docs",
    "chat",
]
VERBS = ["list", "get", "create", "update", "delete", "search", "archive", "share", "move", "tag"]


def _synthetic(n: int) -> ToolSpec:
    """A connector tool shaped like real ones (an MCP server's): a short summary and a schema
    of several described fields."""
    domain, verb = DOMAINS[n % len(DOMAINS)], VERBS[(n // len(DOMAINS)) % len(VERBS)]
    name = f"{domain}_{verb}_{n}"
    text = {"type": "string"}
    schema = {
        "type": "object",
        "properties": {
            "id": {**text, "description": f"The {domain} item's id, as returned by {domain}_list."},
            "query": {**text, "description": "Free text to match against titles and bodies."},
            "owner": {**text, "description": "Only items of this person (email or user id)."},
            "since": {**text, "format": "date-time", "description": "Only items changed since."},
            "labels": {"type": "array", "items": text, "description": "Labels to match or set."},
            "status": {"enum": ["open", "done", "archived"], "description": "Filter or new state."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            "cursor": {**text, "description": "Where the previous page ended."},
        },
        "required": ["id"] if verb in {"get", "update", "delete", "archive", "move"} else [],
    }
    return ToolSpec(name, f"{verb.capitalize()} {domain} items.", schema)


def registry_specs() -> dict[str, ToolSpec]:
    """The built-in tools plus connector tools, 200 in all."""
    builtin = builtin_registry()
    specs = {name: builtin.get(name).spec() for name in builtin.names()}  # type: ignore[union-attr]
    n = 0
    while len(specs) < TOOLS:
        spec = _synthetic(n)
        specs[spec.name] = spec
        n += 1
    return specs


def _tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


def run() -> dict[str, object]:
    """Simulate the conversation; the report."""
    specs = registry_specs()
    summaries = [(name, spec.description) for name, spec in sorted(specs.items())]
    pin = pin_now(SYSTEM_PROMPT, summaries, specs)
    connectors = [name for name in sorted(specs) if name not in builtin_registry().names()]
    history: list[Entry] = []
    previous: list[list[object]] | None = None
    prompt_total = shared_total = unexplained = explained = calls = 0
    started = time.perf_counter()
    last_request = None
    for turn in range(1, TURNS + 1):
        if turn == TURNS // 2:  # a deploy changes one tool's description
            name = connectors[0]
            old = specs[name]
            specs = {**specs, name: ToolSpec(name, old.description + " Faster.", old.parameters)}
            summaries = [(n, s.description) for n, s in sorted(specs.items())]
        history.append(
            Entry(kind="user", text=f"Turn {turn}: please handle item {turn}.", trust="owner")
        )
        steps: list[Entry] = []
        if turn % 20 == 1:  # a tool is loaded along the way
            tool = connectors[turn // 20]
            call = ToolCall(f"t{turn}l", "load_tools", {"query": tool})
            steps += [
                Entry(kind="assistant", text="", tool_calls=(call,)),
                Entry(
                    kind="tool_result",
                    text=f"Loaded {tool}.",
                    call_id=call.id,
                    tool_name="load_tools",
                    meta={"loaded": [tool]},
                ),
            ]
        call = ToolCall(f"t{turn}c", "send_to_user", {"text": f"Done with item {turn}."})
        steps += [
            Entry(kind="assistant", text="", tool_calls=(call,)),
            Entry(kind="tool_result", text="Delivered.", call_id=call.id, tool_name="send_to_user"),
        ]
        for step in [*steps[::2], None]:  # a model call before each step, and a last one
            now = f"Current time: turn {turn}."
            request = pinned_request(pin, SYSTEM_PROMPT, summaries, specs, history, now)
            sections: list[list[object]] = [list(s) for s in request_sections(request)]
            prompt_total += prompt_tokens(sections)
            if previous is not None:
                shared_total += shared_prefix_tokens(previous, sections)
                broke = find_cache_break(previous, sections)
                if broke is not None:
                    explained += broke.explained
                    unexplained += not broke.explained
            previous, last_request, calls = sections, request, calls + 1
            if step is not None:
                history += steps[steps.index(step) : steps.index(step) + 2]
        history.append(Entry(kind="assistant", text=f"Handled item {turn}."))
    assert last_request is not None
    catalogue = _tokens(tool_catalogue(pin.summaries))
    loaded = sum(
        _tokens(json.dumps([t.name, t.description, t.parameters])) for t in last_request.tools
    )
    every_schema = sum(
        _tokens(json.dumps([s.name, s.description, s.parameters])) for s in specs.values()
    )
    share = shared_total / prompt_total if prompt_total else 0.0
    definitions = catalogue + loaded
    return {
        "turns": TURNS,
        "model_calls": calls,
        "tools_registered": len(specs),
        "tools_loaded": len(last_request.tools),
        "cached_input_share": round(share, 4),
        "unexplained_cache_breaks": unexplained,
        "explained_cache_breaks": explained,
        "tool_definition_tokens": definitions,
        "catalogue_tokens": catalogue,
        "loaded_schema_tokens": loaded,
        "all_schemas_tokens": every_schema,
        "tool_definitions_share_of_all_schemas": round(definitions / every_schema, 4),
        "compactions": 0,
        "seconds": round(time.perf_counter() - started, 2),
        "targets_met": {
            "cached_input_share_at_least_95pct": share >= 0.95,
            "no_unexplained_cache_breaks": unexplained == 0,
            "tool_definitions_under_3000_tokens": definitions < 3000,
            "tool_definitions_under_5pct_of_schemas": definitions < 0.05 * every_schema,
        },
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
