"""A deploy that changes tools or instructions leaves a conversation's cached prefix alone:
the conversation keeps its pinned text and hears of the change in its newest message."""

from __future__ import annotations

from nightowl.harness.pins import changes_since, pin_now, pinned_request
from nightowl.harness.prompt import SYSTEM_PROMPT
from nightowl.harness.sections import find_cache_break, request_sections
from nightowl.messages import Entry, ModelRequest, PromptPin, ToolSpec

V1 = {
    "send_to_user": ToolSpec("send_to_user", "Tell the owner.", {"type": "object"}),
    "load_tools": ToolSpec("load_tools", "Load schemas.", {"type": "object"}),
    "shell": ToolSpec("shell", "Run a command.", {"type": "object"}),
    "old_tool": ToolSpec("old_tool", "Going away.", {"type": "object"}),
}


def _summaries(specs: dict[str, ToolSpec]) -> list[tuple[str, str]]:
    return [(name, spec.description) for name, spec in sorted(specs.items())]


def _request(
    pin: PromptPin, specs: dict[str, ToolSpec], history: list[Entry], now: str
) -> tuple[ModelRequest, list[str]]:
    summaries = _summaries(specs)
    request = pinned_request(pin, SYSTEM_PROMPT, summaries, specs, history, f"Current time: {now}.")
    return request, changes_since(pin, SYSTEM_PROMPT, summaries, specs)


def test_a_changed_tool_description_gives_a_note_not_a_new_prefix() -> None:
    pin = pin_now(SYSTEM_PROMPT, _summaries(V1), V1)
    assert PromptPin.from_dict(pin.to_dict()) == pin  # it survives the store
    loaded = Entry(
        kind="tool_result", text="ok", tool_name="load_tools", meta={"loaded": ["shell"]}
    )
    history = [Entry(kind="user", text="hello", trust="owner"), loaded]
    before, notes = _request(pin, V1, history, "09:00")
    assert notes == []

    # The deploy: shell's description changes, a tool arrives, another goes.
    v2 = dict(V1)
    v2["shell"] = ToolSpec("shell", "Run a command, now with a timeout.", {"type": "object"})
    v2["browser_open"] = ToolSpec("browser_open", "Open a page.", {"type": "object"})
    del v2["old_tool"]
    history.append(Entry(kind="user", text="next", trust="owner"))
    after, notes = _request(pin, v2, history, "09:05")

    assert (
        find_cache_break(
            [list(s) for s in request_sections(before)], [list(s) for s in request_sections(after)]
        )
        is None
    )
    assert after.system == before.system  # the old catalogue, byte for byte
    assert [t.description for t in after.tools if t.name == "shell"] == ["Run a command."]
    newest = after.messages[-1].text
    assert "The tool shell was updated; its new version applies after compaction." in newest
    assert "New tool: browser_open — Open a page." in newest
    assert "The tool old_tool is gone" in newest
    assert len(notes) == 3

    changed = changes_since(pin, SYSTEM_PROMPT + " Be brief.", _summaries(V1), V1)
    assert changed == ["nightowl's instructions were updated; they apply after compaction."]


def test_connector_groups_are_pinned_and_changes_reach_the_newest_note() -> None:
    groups = [("crm", "The CRM.")]
    pin = pin_now(SYSTEM_PROMPT, _summaries(V1), V1, groups=groups)
    assert PromptPin.from_dict(pin.to_dict()) == pin
    history = [Entry(kind="user", text="hello", trust="owner")]
    same = pinned_request(pin, SYSTEM_PROMPT, _summaries(V1), V1, history, "t", groups)
    changed = [("crm", "The CRM, with deals."), ("mail", "Mail.")]
    after = pinned_request(pin, SYSTEM_PROMPT, _summaries(V1), V1, history, "t", changed)
    assert same.system == after.system
    assert "Connector crm_* is new or updated: The CRM, with deals." in after.messages[-1].text
    assert "Connector mail_* is new or updated: Mail." in after.messages[-1].text
    assert "Connector" not in same.messages[-1].text
    # A pin stored before groups existed reads back without them.
    old = {k: v for k, v in pin.to_dict().items() if k != "groups"}
    assert PromptPin.from_dict(old).groups == ()
