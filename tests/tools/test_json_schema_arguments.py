"""A connector tool's arguments are checked against its JSON Schema, in words for the agent;
a server's broken schema is reported, never a crash of the step."""

from __future__ import annotations

import json

from nightowl.tools.registry import schema_problems

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_arguments_that_fit_pass_and_others_say_what_to_fix() -> None:
    assert schema_problems(SCHEMA, {"q": "x"}) == ""
    assert schema_problems(SCHEMA, {}) == "arguments: 'q' is a required property"
    assert schema_problems(SCHEMA, {"q": 1}) == "q: 1 is not of type 'string'"
    assert schema_problems(dict(SCHEMA), {"q": "again"}) == ""  # the same schema, made once


def test_a_broken_schema_is_reported() -> None:
    assert schema_problems({"type": "nonsense"}, {}).startswith("its schema is broken")


def test_invalid_arguments_are_answered_with_the_schema_they_must_fit() -> None:
    """A model that called a catalogue tool without loading it has never seen its schema: the
    error gives it (a long one is named for load_tools instead)."""
    from pydantic import BaseModel

    from nightowl.tools.registry import MAX_SCHEMA_IN_ERROR, Tool, ToolRegistry

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
    assert len(json.dumps(long_schema)) > MAX_SCHEMA_IN_ERROR
    toolbox = ToolRegistry([short, long])

    answer = toolbox.parse_arguments("set_timer", {"minutes": 5})
    assert answer.is_error
    assert "seconds: Field required" in answer.content
    assert '"required":["seconds"]' in answer.content  # the schema, to call it right next time
    answer = toolbox.parse_arguments("big", {})
    assert answer.is_error and "load_tools with 'big'" in answer.content
    assert "p29" not in answer.content
    assert toolbox.parse_arguments("set_timer", {"seconds": 5}).seconds == 5
