"""What a conversation knows of its connectors' tools, from its own history (pure).

A connector's tool schema is sent as it was first loaded (recorded with the load_tools
result), so a server that changes its tools mid-conversation never rewrites the cached prefix;
the conversation hears of the change in a note in its newest message instead, and the new
version applies after compaction, as for built-in tools.
"""

from __future__ import annotations

from collections.abc import Sequence

from nightowl.messages import Entry, ToolSpec


def recorded_specs(history: Sequence[Entry]) -> dict[str, ToolSpec]:
    """The schema of each connector tool as this conversation first loaded it."""
    found: dict[str, ToolSpec] = {}
    for entry in history:
        if entry.kind != "tool_result" or entry.tool_name != "load_tools":
            continue
        for name, spec in (entry.meta.get("specs") or {}).items():
            if name not in found and isinstance(spec, list) and len(spec) == 3:
                found[name] = ToolSpec(str(spec[0]), str(spec[1]), dict(spec[2]))
    return found


def listed_tools(history: Sequence[Entry]) -> dict[str, list[str]]:
    """Each connector's tools as the conversation saw them listed last."""
    listed: dict[str, list[str]] = {}
    for entry in history:
        if entry.kind == "tool_result" and entry.tool_name == "load_tools":
            for group, names in (entry.meta.get("listed") or {}).items():
                listed[str(group)] = [str(n) for n in names]
    return listed


def connector_notes(
    history: Sequence[Entry], specs: dict[str, ToolSpec], groups: Sequence[tuple[str, str]]
) -> list[str]:
    """Short notes of what the conversation's connectors changed since it looked: tools
    added or removed since it listed them, and loaded tools their server changed or dropped."""
    notes = []
    current = set(specs)
    for group, seen in listed_tools(history).items():
        if group not in dict(groups):
            continue  # the connector itself is gone: the pin's notes say so
        now = sorted(n for n in current if n.startswith(f"{group}_"))
        added = [n for n in now if n not in seen]
        dropped = [n for n in seen if n not in now]
        if added:
            notes.append(
                f"Connector {group} has new tools: {', '.join(added)} (load_tools gives their "
                "schemas)."
            )
        if dropped:
            notes.append(f"Connector {group} no longer offers: {', '.join(dropped)}.")
    for name, spec in recorded_specs(history).items():
        if name not in current:
            if not any(name in seen for seen in listed_tools(history).values()):
                notes.append(f"The tool {name} is gone; do not call it.")
        elif specs[name] != spec:
            notes.append(
                f"The tool {name} was changed by its server; the version you have stays until "
                "the conversation is compacted (a call that no longer fits gets an error)."
            )
    return notes
