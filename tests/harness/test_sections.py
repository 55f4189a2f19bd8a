"""Section hashes and cache breaks: a request must repeat its predecessor but the newest note."""

from __future__ import annotations

from nightowl.harness.prompt import assemble
from nightowl.harness.sections import (
    find_cache_break,
    prompt_tokens,
    request_sections,
    shared_prefix_tokens,
)
from nightowl.messages import Entry, ToolSpec

SPECS = {
    "send_to_user": ToolSpec("send_to_user", "Tell the owner.", {"type": "object"}),
    "load_tools": ToolSpec("load_tools", "Load schemas.", {"type": "object"}),
    "shell": ToolSpec("shell", "Run a command.", {"type": "object"}),
}
SUMMARIES = [(name, spec.description) for name, spec in SPECS.items()]


def _request(
    history: list[Entry], note: str, specs: dict[str, ToolSpec] = SPECS
) -> list[list[str]]:
    request = assemble(SUMMARIES, specs, history, note)
    return [list(s) for s in request_sections(request)]


def test_a_growing_history_never_breaks_the_prefix() -> None:
    history = [Entry(kind="user", text="hello", trust="owner")]
    first = _request(history, "Current time: 09:00.")
    history.append(Entry(kind="assistant", text="thinking"))
    history.append(Entry(kind="user", text="and then?", trust="owner"))
    second = _request(history, "Current time: 09:05.")
    assert [section[0] for section in first] == [
        "tool:send_to_user",
        "tool:load_tools",
        "system",
        "history:0",
        "newest",
    ]
    assert second[:4] == first[:4] and second[-1][0] == "newest"
    assert find_cache_break(first, second) is None


def test_loading_a_tool_is_an_explained_break_and_a_changed_text_is_not() -> None:
    history = [Entry(kind="user", text="hello", trust="owner")]
    first = _request(history, "t1")
    loaded = Entry(
        kind="tool_result", text="ok", tool_name="load_tools", meta={"loaded": ["shell"]}
    )
    history.append(loaded)
    second = _request(history, "t2")
    broke = find_cache_break(first, second)
    assert broke is not None and broke.explained and broke.section == "tool:shell"

    history[0] = Entry(kind="user", text="hello, edited", trust="owner")
    third = _request(history, "t3")
    broke = find_cache_break(second, third)
    assert broke is not None and not broke.explained and broke.section == "history:0"

    changed = dict(SPECS, shell=ToolSpec("shell", "Run a command, better.", {"type": "object"}))
    fourth = _request(history, "t4", changed)
    broke = find_cache_break(third, fourth)
    assert broke is not None and not broke.explained and broke.reason == "tool:shell changed"
    assert find_cache_break(fourth, fourth[:2]) is not None  # a shorter request breaks too


def test_the_prefix_meter_counts_the_leading_tokens_a_request_repeats() -> None:
    history = [Entry(kind="user", text="x" * 400, trust="owner")]
    first = _request(history, "t1")
    history.append(Entry(kind="assistant", text="y" * 400))
    second = _request(history, "t2")
    total = prompt_tokens(second)
    shared = shared_prefix_tokens(first, second)
    # Everything but the first request's newest note and the new entry is shared.
    assert 0 < shared < total
    assert shared == prompt_tokens(first[:-1])
    assert shared_prefix_tokens([], second) == 0
    assert shared_prefix_tokens(second, second) == total
