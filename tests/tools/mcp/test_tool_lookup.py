"""The safety gate looks up the one tool a call names (Toolbox.lookup) at every call: it finds
exactly the tool the conversation's full set of tools has under that name — built-in first,
a connector's as the owner set it now, none from a connector the conversation may not use, a
name nobody lists, or a schema too large to offer — while reading only the named connector."""

from __future__ import annotations

from typing import Any

from nightowl.store.connectors import (
    add_connector,
    change_connector,
    record_listing,
    set_allowed_connectors,
)
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.users import create_user
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.mcp.connections import Connections
from nightowl.tools.mcp.provider import ConnectorProvider
from nightowl.tools.providers import Toolbox
from nightowl.tools.registry import MAX_SCHEMA_CHARS


def _listed(name: str, read: bool = False, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{name} things",
        "schema": schema or {"type": "object", "properties": {"query": {"type": "string"}}},
        "annotations": {"read_only_hint": True} if read else {},
    }


def test_the_gate_finds_the_tool_the_conversation_has(database: Database) -> None:
    toolbox = Toolbox(builtin_registry(), [ConnectorProvider(database, Connections())])
    huge = {"type": "object", "description": "x" * MAX_SCHEMA_CHARS}
    with database.write() as session:
        owner = create_user(session, "owner").id
        everywhere = create_conversation(session, owner).id
        limited = create_conversation(session, owner).id
        for name in ("crm", "desk"):
            add_connector(session, owner, name, url=f"http://127.0.0.1:1/{name}")
        record_listing(
            session,
            owner,
            "crm",
            [
                _listed("find-contact", read=True),
                _listed("delete_contact"),
                _listed("big", schema=huge),
            ],
        )
        record_listing(session, owner, "desk", [_listed("open_ticket"), _listed("read_file")])
        change_connector(session, owner, "desk", effects={"open_ticket": "send"})
        set_allowed_connectors(session, limited, ["crm"])
    with database.read() as session:
        full = toolbox.for_conversation(session, everywhere)
        names = [*full.names(), "crm_big", "crm_nothing", "nobody_x", "desk", "read_file"]
        found = {name: toolbox.lookup(session, everywhere, name) for name in names}
        in_limited = {
            name: toolbox.lookup(session, limited, name)
            for name in ("crm_find_contact", "desk_open_ticket")
        }
    connector_tools = [n for n in full.names() if full.group_of(n)]
    assert sorted(connector_tools) == [
        "crm_delete_contact",
        "crm_find_contact",
        "desk_open_ticket",
        "desk_read_file",
    ]
    for name in full.names():
        tool, expected = found[name], full.get(name)
        assert tool is not None and expected is not None, name
        assert (tool.name, tool.effect, tool.arguments, tool.output_trust) == (
            expected.name,
            expected.effect,
            expected.arguments,
            expected.output_trust,
        )
    assert found["crm_find_contact"].effect == "read"  # type: ignore[union-attr]
    assert found["crm_delete_contact"].effect == "write"  # type: ignore[union-attr]
    assert found["desk_open_ticket"].effect == "send"  # type: ignore[union-attr]  # the owner's
    assert found["read_file"] is full.get("read_file") is not None  # built-in wins
    for missing in ("crm_big", "crm_nothing", "nobody_x", "desk"):
        assert found[missing] is None, missing
    assert in_limited["crm_find_contact"] is not None
    assert in_limited["desk_open_ticket"] is None  # the conversation may not use desk
