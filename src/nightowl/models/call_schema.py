"""The JSON Schema of one tool call, which the local model's decoding is held to.

A small model writes a call's JSON by itself less reliably than a larger one: a poem's line
breaks as raw newlines inside a string, a name it half remembers, an argument object cut
short. The local worker turns this schema into a llama.cpp grammar (through llama-cpp-python's
own converter), so every reply *is* a well-formed call of a tool the model may name: a loaded
tool with its own argument schema, or a catalogue tool not loaded yet with any argument
object (the registry then answers with how to load it).

Pure: no native code is imported here (the server process never loads llama.cpp).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nightowl.messages import ToolSpec

_REF = "#/$defs/"
# Bounds the converter writes out one nested option per character or item (a 4,000-character
# limit became a 17 MB grammar): the tool's own validation still checks them, and tells the
# model what to fix.
_UNBOUNDED = {"maxLength", "minLength", "maxItems", "minItems", "pattern", "format"}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _hoisted(schema: Any, prefix: str) -> Any:
    """`schema` with its local references renamed under `prefix` (its `$defs` move to the
    call schema's root, beside the other tools') and without the bounds in `_UNBOUNDED`."""
    if isinstance(schema, list):
        return [_hoisted(item, prefix) for item in schema]
    if not isinstance(schema, dict):
        return schema
    moved: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$defs" or key in _UNBOUNDED:
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
            moved[key] = _REF + prefix + value[len(_REF) :]
        elif key == "properties" and isinstance(value, dict):
            # property names are names, not keywords: "format" may be one
            moved[key] = {name: _hoisted(sub, prefix) for name, sub in value.items()}
        else:
            moved[key] = _hoisted(value, prefix)
    return moved


def _arguments(spec: ToolSpec, prefix: str, written: Sequence[str]) -> dict[str, Any]:
    parameters = spec.parameters or {}
    if parameters.get("type", "object") != "object":
        return {"type": "object"}
    schema: dict[str, Any] = _hoisted(parameters, prefix)
    schema.pop("title", None)
    schema["type"] = "object"
    known = schema.get("properties", {})
    required = list(schema.get("required", []))
    schema["required"] = required + [p for p in written if p in known and p not in required]
    return schema


def call_schema(
    loaded: Sequence[ToolSpec],
    other_names: Iterable[str] = (),
    must_write: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """One call `{"name": ..., "arguments": {...}}` of a loaded tool (its own arguments) or of
    another tool the prompt names (`other_names`: any argument object). `must_write`: optional
    arguments a tool's call must spell out all the same (by tool name): a small model that
    must write send_to_user's `final` decides whether it is done, instead of leaving it out
    and being called again to say the same thing twice."""
    options: list[dict[str, Any]] = []
    definitions: dict[str, Any] = {}
    for index, spec in enumerate(loaded):
        prefix = f"t{index}_{_safe(spec.name)}__"
        for name, definition in (spec.parameters or {}).get("$defs", {}).items():
            definitions[prefix + name] = _hoisted(definition, prefix)
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": spec.name},
                    "arguments": _arguments(spec, prefix, (must_write or {}).get(spec.name, ())),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    known = {spec.name for spec in loaded}
    others = sorted({name for name in other_names if name not in known})
    if others:
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"enum": others},
                    "arguments": {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"oneOf": options}
    if definitions:
        schema = {**schema, "$defs": definitions}
    return schema


def loosened(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every tool's arguments any object: what the grammar falls back to when
    a tool's own schema (a connector's, say) is one the converter cannot express."""
    options = [
        {**option, "properties": {**option["properties"], "arguments": {"type": "object"}}}
        for option in schema.get("oneOf", [schema])
    ]
    return options[0] if len(options) == 1 else {"oneOf": options}


# llama-cpp-python's converter lets a string hold any character but `"` and `\`: a raw line
# break too, which is not JSON. JSON's own rule (as llama.cpp's json.gbnf writes it) instead.
_LOOSE_CHAR = 'char ::= [^"\\\\]'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F]'


def grammar_rules(schema: dict[str, Any]) -> str:
    """The llama.cpp grammar (GBNF) of `schema`, through llama-cpp-python's converter, with
    strings held to JSON's. Imports llama.cpp: for the local worker's process only."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    rules: str = json_schema_to_gbnf(json.dumps(schema))  # its property order is the call's
    return rules.replace(_LOOSE_CHAR, _JSON_CHAR)
