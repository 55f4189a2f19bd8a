"""Prompt assembly: a fixed order, a prefix that only grows, tool schemas loaded on demand."""

from __future__ import annotations

import pytest

from nightowl.harness.prompt import assemble, loaded_tool_names, tool_catalogue
from nightowl.messages import Entry, ToolCall, ToolSpec
from nightowl.tools.registry import ToolRegistry

SUMMARIES = [("load_tools", "load tools"), ("send_to_user", "speak"), ("wait", "pause")]
SPECS = {name: ToolSpec(name, summary, {"type": "object"}) for name, summary in SUMMARIES}


def test_only_core_tools_are_loaded_until_the_model_loads_more() -> None:
    history = [Entry(kind="user", text="hi")]
    request = assemble(SUMMARIES, SPECS, history)
    assert [t.name for t in request.tools] == ["send_to_user", "load_tools"]
    assert "- wait: pause" in request.system  # every tool is named in the prompt
    history += [
        Entry(kind="assistant", tool_calls=(ToolCall("c1", "load_tools", {"query": "wait"}),)),
        Entry(kind="tool_result", tool_name="load_tools", call_id="c1", meta={"loaded": ["wait"]}),
    ]
    later = assemble(SUMMARIES, SPECS, history)
    assert [t.name for t in later.tools] == ["send_to_user", "load_tools", "wait"]
    assert loaded_tool_names(history)[-1] == "wait"


def test_consecutive_requests_share_everything_but_the_newest_note() -> None:
    history = [Entry(kind="user", text="hi")]
    first = assemble(SUMMARIES, SPECS, history, "Current time: 10:00")
    history.append(Entry(kind="assistant", text="private thought"))
    history.append(Entry(kind="user", text="more"))
    second = assemble(SUMMARIES, SPECS, history, "Current time: 10:01")
    assert first.system == second.system
    assert first.messages[:-1] == second.messages[: len(first.messages) - 1]
    assert second.messages[-1].kind == "notice" and "10:01" in second.messages[-1].text


def test_a_connectors_tools_share_one_catalogue_line() -> None:
    summaries = [
        ("calendar_create", "Create an event."),
        ("calendar_list", "List events."),
        ("calendarist", "Not in the group (no underscore after the group's name)."),
        ("send_to_user", "speak"),
    ]
    catalogue = tool_catalogue(summaries, [("calendar", "Google Calendar events.")])
    assert catalogue.splitlines() == [
        "Tools:",
        "- calendarist: Not in the group (no underscore after the group's name).",
        "- send_to_user: speak",
        "- calendar_*: Google Calendar events. Tools: create, list.",
    ]
    # A group whose tools are not listed (a connector: load_tools with its name lists them)
    # still has its line; without groups every tool has its line.
    assert "- mail_*: Mail." in tool_catalogue(summaries, [("mail", "Mail.")])
    assert "- calendar_list: List events." in tool_catalogue(summaries)


def test_the_registry_validates_groups() -> None:
    registry = ToolRegistry()
    registry.add_group("crm", "The CRM.")
    assert registry.groups() == [("crm", "The CRM.")]
    for bad in ("two words", "with_underscore", ""):
        with pytest.raises(ValueError, match="must be a word"):
            registry.add_group(bad, "x")
