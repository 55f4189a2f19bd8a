"""A connector tool's arguments are checked against its JSON Schema, in words for the agent;
a server's broken schema is reported, never a crash of the step."""

from __future__ import annotations

from nightowl.tools.registry import schema_problems

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_arguments_that_fit_pass_and_others_say_what_to_fix() -> None:
    assert schema_problems(SCHEMA, {"q": "x"}) == ""
    assert schema_problems(SCHEMA, {}) == "arguments: 'q' is a required property"
    assert schema_problems(SCHEMA, {"q": 1}) == "q: 1 is not of type 'string'"
    assert schema_problems(dict(SCHEMA), {"q": "again"}) == ""  # the same schema, made once


def test_a_broken_schema_is_reported() -> None:
    assert schema_problems({"type": "nonsense"}, {}).startswith("its schema is broken")


def test_invalid_arguments_load_the_schema_they_must_fit() -> None:
    """A model that called a catalogue tool without loading it has never seen its schema: the
    error says what is wrong and loads the schema (as load_tools does), long or short, so the
    next request carries it (and holds the local model's next call to it)."""
    from pydantic import BaseModel

    from nightowl.harness.prompt import assemble, loaded_tool_names
    from nightowl.messages import Entry, ToolCall
    from nightowl.tools.registry import Tool, ToolRegistry

    class Args(BaseModel):
        seconds: float

    async def run(*_: object) -> None:
        return None

    short = Tool("set_timer", "Set a timer.", "write", Args, run)  # type: ignore[arg-type]
    long_schema = {
        "type": "object",
        "properties": {f"p{n}": {"type": "string", "description": "x" * 40} for n in range(30)},
        "required": ["p0"],
    }
    long = Tool("big", "A big one.", "read", long_schema, run)  # type: ignore[arg-type]
    toolbox = ToolRegistry([short, long])

    answer = toolbox.parse_arguments("set_timer", {"minutes": 5})
    assert answer.is_error
    assert "seconds: Field required" in answer.content
    assert "Its schema is loaded now" in answer.content
    assert answer.meta == {"loaded": ["set_timer"]}
    answer = toolbox.parse_arguments("big", {})
    assert answer.is_error and answer.meta == {"loaded": ["big"]}
    assert "p29" not in answer.content  # the schema rides with the tools, not in the words
    assert toolbox.parse_arguments("set_timer", {"seconds": 5}).seconds == 5

    # The next request has the schema among its tools.
    wrong = toolbox.parse_arguments("set_timer", {"minutes": 5})
    history = [
        Entry(kind="user", text="a timer for five minutes"),
        Entry(
            kind="assistant",
            tool_calls=(ToolCall(id="c1", name="set_timer", arguments={"minutes": 5}),),
        ),
        Entry(
            kind="tool_result",
            text=wrong.content,
            call_id="c1",
            tool_name="set_timer",
            is_error=True,
            trust="agent",
            meta={**wrong.meta, "trust": "agent"},
        ),
    ]
    assert "set_timer" in loaded_tool_names(history)
    request = assemble(toolbox.summaries(), toolbox.specs(), history)
    assert "set_timer" in [spec.name for spec in request.tools]
    assert "big" not in [spec.name for spec in request.tools]
