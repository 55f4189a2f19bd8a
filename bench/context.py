"""Cache stability of the prompt over a long conversation, through the real harness.

A scripted 200-turn conversation (a user message, a tool call and its result, a reply per
turn) with 200 tools registered, a tool loaded every 20 turns, and one deploy halfway that
changes a tool's description. Every model request is assembled exactly as the turn workflow
does (pinned prompt, loaded schemas, newest note), hashed by section and metered.

Connector tools come in groups (one catalogue line per connector, as an MCP server's would),
and the conversation is compacted once, three quarters in (which also drops the schemas
loaded before it). Prints JSON: `cached_input_share` (the prefix-cache meter over all requests;
target >= 0.95), `unexplained_cache_breaks` (target 0), `tool_definition_tokens` (catalogue plus
loaded schemas in the last request; target < 3,000 and < 5% of `all_schemas_tokens`, every
schema in full; the mean and peak over all requests beside it). `--local-turns N` also sends a
shorter run of the same conversation to the embedded local model and reports how many prompt
tokens its KV cache reused.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nightowl.harness.compaction import (  # noqa: E402
    compacted_entry,
    latest_user_facing,
    summary_request,
)
from nightowl.harness.pins import pin_now, pinned_request  # noqa: E402
from nightowl.harness.prompt import SYSTEM_PROMPT  # noqa: E402
from nightowl.harness.sections import (  # noqa: E402
    CHARS_PER_TOKEN,
    find_cache_break,
    prompt_tokens,
    request_sections,
    shared_prefix_tokens,
)
from nightowl.messages import Entry, ModelRequest, PromptPin, ToolCall, ToolSpec  # noqa: E402
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


def registry() -> tuple[dict[str, ToolSpec], list[tuple[str, str]]]:
    """The built-in tools plus connector tools, 200 in all, and the connectors' groups."""
    builtin = builtin_registry()
    specs = builtin.specs()
    n = 0
    while len(specs) < TOOLS:
        spec = _synthetic(n)
        specs[spec.name] = spec
        n += 1
    groups = [(domain, f"The {domain} connector ({domain} items).") for domain in sorted(DOMAINS)]
    return specs, groups


def _tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


@dataclass
class Conversation:
    """The simulated conversation: its pin, history and what the server currently has."""

    specs: dict[str, ToolSpec]
    groups: list[tuple[str, str]]
    summaries: list[tuple[str, str]] = field(default_factory=list)
    pin: PromptPin | None = None
    history: list[Entry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.summaries = [(n, s.description) for n, s in sorted(self.specs.items())]
        self.pin = pin_now(SYSTEM_PROMPT, self.summaries, self.specs, groups=self.groups)

    def request(self, note: str) -> ModelRequest:
        """The next request, exactly as the turn workflow assembles it."""
        assert self.pin is not None
        return pinned_request(
            self.pin, SYSTEM_PROMPT, self.summaries, self.specs, self.history, note, self.groups
        )

    def summary_request(self) -> ModelRequest:
        """The compaction's summary request."""
        assert self.pin is not None
        return summary_request(self.pin, SYSTEM_PROMPT, self.summaries, self.specs, self.history)

    def compact(self, summary: str) -> None:
        """Replace the history by the summary and re-pin the server's current prompt."""
        kept = latest_user_facing(self.history, 6)
        self.history = [compacted_entry(summary, kept, self.history)]
        self.pin = pin_now(SYSTEM_PROMPT, self.summaries, self.specs, groups=self.groups)


def requests(turns: int, compact_at: int) -> Iterator[tuple[str, ModelRequest]]:
    """Every request of the scripted conversation, in order, with its kind ("turn" or
    "compaction"): a tool loaded every 20 turns, one description change halfway, one
    compaction after turn `compact_at`."""
    specs, groups = registry()
    chat = Conversation(specs, groups)
    connectors = [name for name in sorted(specs) if name not in builtin_registry().names()]
    for turn in range(1, turns + 1):
        if turn == turns // 2:  # a deploy changes one tool's description
            name = connectors[0]
            old = chat.specs[name]
            chat.specs = {
                **chat.specs,
                name: ToolSpec(name, old.description + " Faster.", old.parameters),
            }
            chat.summaries = [(n, s.description) for n, s in sorted(chat.specs.items())]
        chat.history.append(
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
        for index in range(0, len(steps), 2):  # a model call before each step
            yield "turn", chat.request(f"Current time: turn {turn}.")
            chat.history += steps[index : index + 2]
        yield "turn", chat.request(f"Current time: turn {turn}.")  # and a last one
        chat.history.append(Entry(kind="assistant", text=f"Handled item {turn}."))
        if turn == compact_at:
            yield "compaction", chat.summary_request()
            chat.compact(f"Summary: items 1 to {turn} are handled; nothing is open.")


def definition_tokens(request: ModelRequest) -> tuple[int, int]:
    """(catalogue, loaded schemas) tokens of a request's tool definitions."""
    catalogue = _tokens(request.system) - _tokens(SYSTEM_PROMPT)
    loaded = sum(_tokens(json.dumps([t.name, t.description, t.parameters])) for t in request.tools)
    return catalogue, loaded


def run(turns: int = TURNS) -> dict[str, object]:
    """Simulate the conversation through the harness and meter it; the report."""
    previous: list[list[object]] | None = None
    prompt_total = shared_total = unexplained = explained = calls = compactions = 0
    summary_shared = summary_prompt = 0
    compacted = False
    started = time.perf_counter()
    last_request = None
    per_request: list[int] = []
    for kind, request in requests(turns, compact_at=turns * 3 // 4):
        sections: list[list[object]] = [list(s) for s in request_sections(request)]
        prompt_total += prompt_tokens(sections)
        if previous is not None:
            shared = shared_prefix_tokens(previous, sections)
            shared_total += shared
            broke = find_cache_break(previous, sections)
            if broke is not None:
                # The engine marks the first request after a compaction as explained.
                known = broke.explained or compacted
                explained += known
                unexplained += not known
            if kind == "compaction":
                summary_shared, summary_prompt = shared, prompt_tokens(sections)
        compacted = kind == "compaction"
        compactions += kind == "compaction"
        previous, calls = sections, calls + 1
        if kind == "turn":
            last_request = request
            per_request.append(sum(definition_tokens(request)))
    assert last_request is not None
    catalogue, loaded = definition_tokens(last_request)
    specs, _ = registry()
    every_schema = sum(
        _tokens(json.dumps([s.name, s.description, s.parameters])) for s in specs.values()
    )
    share = shared_total / prompt_total if prompt_total else 0.0
    definitions = catalogue + loaded
    return {
        "turns": turns,
        "model_calls": calls,
        "tools_registered": len(specs),
        "tools_loaded_at_end": len(last_request.tools),
        "cached_input_share": round(share, 4),
        "unexplained_cache_breaks": unexplained,
        "explained_cache_breaks": explained,
        "tool_definition_tokens": definitions,
        "catalogue_tokens": catalogue,
        "loaded_schema_tokens": loaded,
        "tool_definition_tokens_mean": round(sum(per_request) / len(per_request)),
        "tool_definition_tokens_max": max(per_request),
        "all_schemas_tokens": every_schema,
        "tool_definitions_share_of_all_schemas": round(definitions / every_schema, 4),
        "compactions": compactions,
        "summary_request_prefix_share": round(summary_shared / max(summary_prompt, 1), 4),
        "seconds": round(time.perf_counter() - started, 2),
        "targets_met": {
            "cached_input_share_at_least_95pct": share >= 0.95,
            "no_unexplained_cache_breaks": unexplained == 0,
            "tool_definitions_under_3000_tokens": definitions < 3000,
            "tool_definitions_under_5pct_of_schemas": definitions < 0.05 * every_schema,
        },
    }


def run_local(turns: int) -> dict[str, object]:
    """The same conversation, shorter (the local model's context is 8,192 tokens), sent to the
    embedded local model: how much of each prompt its KV cache reused."""
    from nightowl.models.local import LocalModel

    model = LocalModel(threads=2)
    fresh = reused = calls = 0
    started = time.perf_counter()
    try:
        for _kind, request in requests(turns, compact_at=turns * 3 // 4):
            reply = asyncio.run(model.complete(replace(request, max_output_tokens=8)))
            fresh += reply.usage.input_tokens
            reused += reply.usage.cache_read_tokens
            calls += 1
    finally:
        model.close()  # its process
    return {
        "turns": turns,
        "model_calls": calls,
        "input_tokens": fresh,
        "reused_prefix_tokens": reused,
        "reused_share": round(reused / max(fresh + reused, 1), 4),
        "seconds": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--local-turns",
        type=int,
        default=0,
        help="also run this many turns on the embedded local model (needs its weights)",
    )
    options = parser.parse_args()
    report = run()
    if options.local_turns:
        report["local_model"] = run_local(options.local_turns)
    print(json.dumps(report, indent=2))
