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
