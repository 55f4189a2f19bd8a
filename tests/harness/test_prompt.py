"""Prompt assembly: a fixed order, a prefix that only grows, tool schemas loaded on demand."""

from __future__ import annotations

from nightowl.harness.prompt import assemble, loaded_tool_names
from nightowl.harness.transcript import Entry, ToolCall
from nightowl.models.base import ToolSpec

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
