"""A conversation's pinned prompt: the instructions, tool catalogue and tool schemas as first
sent, kept byte for byte until the conversation is compacted.

A deploy that changes a tool's description, adds or removes a tool, or edits the instructions
must not rewrite text a provider has cached: the conversation goes on with its pinned text and
hears of the change in a short note in its newest message instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from nightowl.harness.connectors import connector_notes
from nightowl.harness.prompt import assemble
from nightowl.messages import Entry, ModelRequest, PromptPin, ToolSpec


def pin_now(
    instructions: str,
    summaries: Sequence[tuple[str, str]],
    specs: dict[str, ToolSpec],
    *,
    groups: Sequence[tuple[str, str]] = (),
    profile: str = "",
) -> PromptPin:
    """Pin the prompt as the server would send it now (with the memory section `profile`)."""
    return PromptPin(instructions, tuple(summaries), dict(specs), tuple(groups), profile)


def effective_specs(pin: PromptPin, current: dict[str, ToolSpec]) -> dict[str, ToolSpec]:
    """Schemas to send: the pinned ones, and the current one of a tool added since pinning."""
    return {**{n: s for n, s in current.items() if n not in pin.specs}, **pin.specs}


def changes_since(
    pin: PromptPin,
    instructions: str,
    summaries: Sequence[tuple[str, str]],
    specs: dict[str, ToolSpec],
    groups: Sequence[tuple[str, str]] | None = None,
) -> list[str]:
    """Short notes of what the server changed since the pin (for the newest message)."""
    notes = []
    pinned_groups = dict(pin.groups)
    now_groups = list(groups if groups is not None else pin.groups)
    for group, description in now_groups:
        if pinned_groups.get(group) != description:
            notes.append(f"Connector {group}_* is new or updated: {description}")
    notes += [
        f"Connector {group}_* is gone; do not call its tools."
        for group in pinned_groups
        if group not in dict(now_groups)
    ]
    if instructions != pin.instructions:
        notes.append("nightowl's instructions were updated; they apply after compaction.")
    pinned_names = dict(pin.summaries)
    for name, summary in summaries:
        if name not in pinned_names:
            notes.append(f"New tool: {name} — {summary} (load_tools gives its schema).")
        elif pin.specs.get(name) != specs.get(name):
            notes.append(f"The tool {name} was updated; its new version applies after compaction.")
    current = dict(summaries)
    notes += [
        f"The tool {name} is gone; do not call it." for name in pinned_names if name not in current
    ]
    return notes


def server_changes(
    pin: PromptPin,
    instructions: str,
    summaries: Sequence[tuple[str, str]],
    specs: dict[str, ToolSpec],
    history: Sequence[Entry],
    groups: Sequence[tuple[str, str]] | None = None,
) -> list[str]:
    """What the server changed since the pin, one line each (for the newest note; `groups`:
    the server's connector groups now, None when they cannot have changed)."""
    notes = changes_since(pin, instructions, summaries, specs, groups)
    notes += connector_notes(history, specs, groups if groups is not None else pin.groups)
    return notes


def pinned_request(
    pin: PromptPin,
    instructions: str,
    summaries: Sequence[tuple[str, str]],
    specs: dict[str, ToolSpec],
    history: Sequence[Entry],
    newest: str | Entry,
    groups: Sequence[tuple[str, str]] | None = None,
) -> ModelRequest:
    """The next request of a conversation: its pinned prompt, its history, and a newest note.
    `newest` as text (the time) is followed by what the server changed since the pin; as an
    entry it is the whole note, kept in the history once the call is made (harness/notes.py)."""
    if isinstance(newest, str):
        changes = server_changes(pin, instructions, summaries, specs, history, groups)
        newest = "\n".join([newest, *changes])
    return assemble(
        pin.summaries,
        effective_specs(pin, specs),
        history,
        newest,
        instructions=pin.instructions,
        groups=pin.groups,
        profile=pin.profile,
    )
