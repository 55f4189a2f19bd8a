"""The JSON Schema a local model's call is held to, and the llama.cpp grammar made from it
(through llama-cpp-python's own converter, as the local worker does)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from nightowl.messages import ToolSpec
from nightowl.models.call_schema import call_schema, grammar_rules, loosened
from nightowl.tools.builtin import builtin_registry


class _Button(BaseModel):
    label: str = Field(max_length=80)


class _Args(BaseModel):
    text: str = Field(min_length=1, max_length=32000)
    format: str = "plain"  # a property named like a keyword stays a property
    buttons: list[_Button] = Field(default_factory=list, max_length=6)
    final: bool = False


SEND = ToolSpec("send_to_user", "Tell the owner.", _Args.model_json_schema())
WAIT = ToolSpec(
    "wait",
    "Wait.",
    {"type": "object", "properties": {"seconds": {"type": "integer"}}, "required": ["seconds"]},
)


def _options(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return list(schema.get("oneOf", [schema]))


def test_each_loaded_tool_is_one_option_with_its_own_arguments_and_name_first() -> None:
    schema = call_schema([SEND, WAIT], ["send_to_user", "wait", "shell"])
    options = _options(schema)
    assert [list(o["properties"]) for o in options] == [["name", "arguments"]] * 3
    assert options[0]["properties"]["name"] == {"const": "send_to_user"}
    assert options[1]["properties"]["arguments"]["required"] == ["seconds"]
    # a tool the prompt names but did not load: any argument object (the registry answers)
    assert options[2]["properties"] == {
        "name": {"enum": ["shell"]},
        "arguments": {"type": "object"},
    }


def test_definitions_move_to_the_root_and_bounds_are_left_to_the_tool() -> None:
    schema = call_schema([SEND])
    arguments = schema["properties"]["arguments"]
    assert "format" in arguments["properties"]
    ref = arguments["properties"]["buttons"]["items"]["$ref"]
    assert ref.startswith("#/$defs/") and ref.removeprefix("#/$defs/") in schema["$defs"]
    text = json.dumps(schema)
    assert "maxLength" not in text and "maxItems" not in text and "minLength" not in text


def test_must_write_makes_an_optional_argument_required() -> None:
    arguments = call_schema([SEND], must_write={"send_to_user": ("final",)})["properties"]
    assert arguments["arguments"]["required"] == ["text", "final"]
    plain = call_schema([SEND])["properties"]["arguments"]["required"]
    assert plain == ["text"]


def test_every_builtin_tool_makes_a_small_grammar_that_writes_the_name_first() -> None:
    specs = list(builtin_registry().specs().values())
    schema = call_schema(specs, ["browser_open"], must_write={"send_to_user": ("final",)})
    rules = grammar_rules(schema)
    # A 4,000-character bound written out per character made 17 MB; without bounds: small.
    assert len(rules) < 50_000
    first = next(line for line in rules.splitlines() if line.startswith("alternative-0 ::="))
    assert first.index("name-kv") < first.index("arguments-kv"), first
    # A string in the grammar cannot hold a raw line break (a poem's lines are escaped).
    (char,) = [line for line in rules.splitlines() if line.startswith("char ::=")]
    assert char.startswith('char ::= [^"\\\\\\x7F\\x00-\\x1F]'), char


def test_a_schema_the_converter_cannot_express_falls_back_to_any_arguments() -> None:
    odd = ToolSpec("odd", "Odd.", {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})
    schema = call_schema([SEND, odd], ["shell"])
    try:
        grammar_rules(schema)
    except Exception:  # what the worker catches
        pass
    else:
        raise AssertionError("the converter took a reference to nowhere")
    rules = grammar_rules(loosened(schema))
    assert '"\\"odd\\""' in rules and '"\\"send_to_user\\""' in rules
    assert all(
        option["properties"]["arguments"] == {"type": "object"}
        for option in loosened(schema)["oneOf"]
    )
