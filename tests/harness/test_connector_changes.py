"""A connector that changes its tools mid-conversation: the conversation hears of it in a note
in its newest message, and the cached prefix (tool schemas as loaded) does not change."""

from __future__ import annotations

from nightowl.harness.pins import pin_now, pinned_request
from nightowl.harness.sections import find_cache_break, request_sections
from nightowl.messages import Entry, ToolCall, ToolSpec

GROUPS = [("crm", "The CRM. (MCP connector; load_tools crm lists its tools)")]
BUILTIN = {n: ToolSpec(n, n, {"type": "object"}) for n in ("load_tools", "send_to_user")}
FIND = ToolSpec("crm_find", "Find a contact.", {"type": "object", "properties": {"q": {}}})


def _history() -> list[Entry]:
    return [
        Entry(kind="user", text="find Dana", trust="owner"),
        Entry(kind="assistant", tool_calls=(ToolCall("1", "load_tools", {"query": "crm"}),)),
        Entry(
            kind="tool_result",
            tool_name="load_tools",
            call_id="1",
            meta={"listed": {"crm": ["crm_find"]}},
        ),
        Entry(kind="assistant", tool_calls=(ToolCall("2", "load_tools", {"query": "crm_find"}),)),
        Entry(
            kind="tool_result",
            tool_name="load_tools",
            call_id="2",
            meta={
                "loaded": ["crm_find"],
                "specs": {"crm_find": [FIND.name, FIND.description, FIND.parameters]},
            },
        ),
    ]


def test_a_changed_tool_list_is_a_note_and_never_a_change_to_the_cached_prefix() -> None:
    summaries = [(n, n) for n in BUILTIN]
    pin = pin_now("instructions", summaries, BUILTIN, groups=GROUPS)
    history = _history()
    before = pinned_request(
        pin, "instructions", summaries, {**BUILTIN, "crm_find": FIND}, history, "10:00", GROUPS
    )
    assert [t.name for t in before.tools] == ["send_to_user", "load_tools", "crm_find"]
    # The server sends tools/list_changed: crm_find takes a new argument, crm_add appears.
    changed = ToolSpec("crm_find", "Find a contact.", {"type": "object", "properties": {"x": {}}})
    added = ToolSpec("crm_add", "Add a contact.", {"type": "object"})
    now = {**BUILTIN, "crm_find": changed, "crm_add": added}
    history.append(Entry(kind="assistant", text="thinking"))
    after = pinned_request(pin, "instructions", summaries, now, history, "10:01", GROUPS)
    # The schema goes on as first loaded: no cache break at all.
    assert after.tools == before.tools
    assert find_cache_break(request_sections(before), request_sections(after)) is None
    note = after.messages[-1].text
    assert "Connector crm has new tools: crm_add" in note
    assert "The tool crm_find was changed by its server" in note
    # A tool the server dropped is named too.
    gone = pinned_request(
        pin, "instructions", summaries, {**BUILTIN, "crm_add": added}, history, "10:02", GROUPS
    )
    assert "Connector crm no longer offers: crm_find." in gone.messages[-1].text
    assert gone.tools == before.tools  # still the same prefix


def test_a_removed_connector_is_named_in_the_note() -> None:
    summaries = [(n, n) for n in BUILTIN]
    pin = pin_now("instructions", summaries, BUILTIN, groups=GROUPS)
    request = pinned_request(pin, "instructions", summaries, BUILTIN, [], "10:00", [])
    assert "Connector crm_* is gone" in request.messages[-1].text
    assert "- crm_*: The CRM." in request.system  # the pinned catalogue stays as it was
