"""Reading the tool calls small local models write, leniently."""

from __future__ import annotations

from nightowl.messages import Entry, ModelRequest, ToolCall, ToolSpec
from nightowl.models.chatml import read_reply, render, system_block

TOOLS = {"send_to_user", "wait"}


def test_tagged_calls() -> None:
    text, calls = read_reply(
        'Let me.\n<tool_call>\n{"name": "wait", "arguments": {"seconds": 2}}\n</tool_call>', TOOLS
    )
    assert text == "Let me."
    assert [(c.name, c.arguments) for c in calls] == [("wait", {"seconds": 2})]


def test_fenced_and_bare_json_and_string_arguments() -> None:
    _, fenced = read_reply('```json\n{"name": "wait", "arguments": {"seconds": 1}}\n```', TOOLS)
    assert fenced[0].arguments == {"seconds": 1}
    text, bare = read_reply(
        '{"name": "send_to_user", "arguments": "{\\"text\\": \\"hi\\"}"}', TOOLS
    )
    assert bare[0].arguments == {"text": "hi"} and text == ""


def test_unknown_tools_and_prose_are_not_calls() -> None:
    text, calls = read_reply('I would use {"name": "rm_rf", "arguments": {}} but no.', TOOLS)
    assert calls == [] and text.startswith("I would use")
    assert read_reply("just words {not json}", TOOLS) == ("just words {not json}", [])


def test_render_merges_consecutive_user_turns_and_ends_with_the_assistant() -> None:
    request = ModelRequest(
        system="sys",
        tools=(ToolSpec("wait", "pause", {"type": "object"}),),
        messages=(Entry(kind="user", text="hi"), Entry(kind="notice", text="time: noon")),
    )
    prompt = render(request)
    assert prompt.count("<|im_start|>user") == 1
    assert "hi\n\n(time: noon)" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert '"name": "wait"' in prompt


def test_a_line_break_written_inside_a_string_is_still_a_call() -> None:
    """A poem's lines as raw line breaks (not `\\n` escapes): the call the model meant."""
    _, calls = read_reply(
        '<tool_call>\n{"name": "send_to_user", "arguments": {"text": "Owls\nat night", '
        '"final": true}}\n</tool_call>',
        TOOLS,
    )
    assert [(c.name, c.arguments) for c in calls] == [
        ("send_to_user", {"text": "Owls\nat night", "final": True})
    ]


def test_a_loaded_tools_schema_is_in_its_load_result_and_the_system_block_never_changes() -> None:
    """The local model keeps the system block's state for the whole conversation: a tool
    loaded with load_tools shows its schema where it was loaded (once), not in the system
    block, so nothing before the newest message has to be evaluated again."""
    send = ToolSpec("send_to_user", "say", {"type": "object"})
    load = ToolSpec("load_tools", "load", {"type": "object"})
    write = ToolSpec("write_file", "write a file", {"type": "object", "required": ["path"]})
    asked = Entry(kind="user", text="make a file")
    call = Entry(
        kind="assistant",
        tool_calls=(ToolCall(id="c1", name="load_tools", arguments={"query": "write_file"}),),
    )
    loaded = Entry(
        kind="tool_result",
        text="Loaded; you can call these now:\nwrite_file (write): write a file",
        tool_name="load_tools",
        call_id="c1",
        meta={"loaded": ["write_file", "send_to_user"]},
    )
    again = Entry(
        kind="tool_result",
        text="Loaded",
        tool_name="load_tools",
        call_id="c2",
        meta={"loaded": ["write_file"]},
    )
    before = ModelRequest(system="sys", tools=(send, load), messages=(asked,))
    after = ModelRequest(
        system="sys", tools=(send, load, write), messages=(asked, call, loaded, call, again)
    )
    assert system_block(after) == system_block(before)
    assert '"name": "send_to_user"' in system_block(after)
    prompt = render(after)
    assert prompt.startswith(system_block(before))
    assert prompt.count('"name": "write_file", "description": "write a file"') == 1
    shown = prompt.index('{"type": "function", "function": {"name": "write_file"')
    assert prompt.index("Loaded; you can call these now") < shown < prompt.rindex("Loaded")
    assert "<tools>" not in prompt[prompt.rindex("Loaded") :]


def test_a_call_that_did_not_fit_shows_the_schema_in_its_answer_once() -> None:
    """The answer to a call whose arguments did not fit its schema loads the schema: the
    local model reads it in that answer (once), and the system block stays the same."""
    send = ToolSpec("send_to_user", "say", {"type": "object"})
    read = ToolSpec("read_file", "read a file", {"type": "object", "required": ["path"]})
    asked = Entry(kind="user", text="read plan.md")
    call = Entry(
        kind="assistant",
        tool_calls=(ToolCall(id="c1", name="read_file", arguments={"file": "plan.md"}),),
    )
    refused = Entry(
        kind="tool_result",
        text="The arguments for read_file are invalid (path: Field required).",
        tool_name="read_file",
        call_id="c1",
        is_error=True,
        trust="agent",
        meta={"loaded": ["read_file"], "trust": "agent"},
    )
    before = ModelRequest(system="sys", tools=(send,), messages=(asked,))
    after = ModelRequest(
        system="sys", tools=(send, read), messages=(asked, call, refused, call, refused)
    )
    assert system_block(after) == system_block(before)
    prompt = render(after)
    assert prompt.count('"name": "read_file", "description": "read a file"') == 1
    first = prompt.index("path: Field required")
    assert first < prompt.index('{"type": "function", "function": {"name": "read_file"')


def test_outside_text_reaches_the_local_model_fenced_without_the_reminder() -> None:
    """The local model reads outside text fenced and quoted, without the reminder sentence
    the other adapters get (it quoted it as what a command printed); its instructions say
    what the tags mean."""
    send = ToolSpec("send_to_user", "say", {"type": "object"})
    result = Entry(
        kind="tool_result",
        text="fjord-3471",
        tool_name="shell",
        call_id="c1",
        trust="untrusted",
    )
    call = Entry(
        kind="assistant",
        tool_calls=(ToolCall(id="c1", name="shell", arguments={"command": "cat ticket.txt"}),),
    )
    prompt = render(
        ModelRequest(
            system="sys", tools=(send,), messages=(Entry(kind="user", text="go"), call, result)
        )
    )
    assert "<untrusted-data id=" in prompt and "\u2502 fjord-3471\n</untrusted-data id=" in prompt
    assert "The lines above" not in prompt
