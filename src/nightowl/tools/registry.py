"""Tools: name, one-line summary, argument schema, declared effect, and how to run them."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from nightowl.computer.sandbox import SandboxError
from nightowl.messages import ToolSpec
from nightowl.store.database import Database

if TYPE_CHECKING:
    from nightowl.computer.protocol import Computer, ComputerPool
    from nightowl.safety.redaction import RedactionSpec

Effect = Literal["read", "write", "send", "spend"]
# Where a tool's output comes from: "agent" (nightowl's own words: a confirmation, a status)
# or "untrusted" (anything read from the network, from files, a page, a process's output).
OutputTrust = Literal["agent", "untrusted"]
MAX_SCHEMA_CHARS = 4000


@dataclass(frozen=True)
class ToolContext:
    """What a running tool may know and touch."""

    database: Database
    blob_dir: Path
    conversation_id: str
    owner_id: str
    turn_id: str
    call_id: str
    # The owner's files (the home of their computer); attachments are read from here.
    home: Path
    max_attachment_bytes: int = 25 * 1024 * 1024
    # The owner's sandboxes; None where this server runs without a computer.
    computers: ComputerPool | None = None
    # Finds the owner's secrets in what a tool keeps itself (the shell's full output file);
    # None when the owner has none.
    redaction: RedactionSpec | None = None
    # The tools of this owner and conversation (built-in and connectors'); load_tools searches
    # them. None: the built-in tools only.
    tools: ToolRegistry | None = None
    # Whose computer the tools use: the owner's, or an isolated helper's own ("" = owner's).
    computer_id: str = ""
    # What the tool's `read_before` returned in the tool-call step's first transaction;
    # None when it did not run there (a tool run outside the step reads for itself).
    read_before: Any = None

    async def sandbox(self) -> Computer:
        """The computer's sandbox, awake and held for this turn (SandboxError when
        unavailable)."""
        if self.computers is None:
            raise SandboxError("this server runs without a computer (no sandbox backend)")
        return await self.computers.acquire(self.computer_id or self.owner_id, self.turn_id)


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer to the model; errors are written so the agent knows what to do next."""

    content: str
    is_error: bool = False
    ends_turn: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    """One tool the agent can call."""

    name: str
    summary: str
    effect: Effect
    # A pydantic class (built-in tools), or a JSON Schema (a connector's): `run` then gets
    # the validated arguments as a dict.
    arguments: type[BaseModel] | dict[str, Any]
    run: Callable[[Any, ToolContext], Awaitable[ToolResult]]
    # What the owner sees while it runs ("reading a web page"); never the model's own words.
    activity: str = "working"
    # Whether `{{secret:NAME}}` in its arguments is replaced by the secret's value. Only a tool
    # that needs a secret to do its job takes one (and the safety gate checks where it sends
    # it: safety/destinations.py); any other refuses a reference, since what it is given is
    # stored or shown.
    uses_secrets: bool = False
    # Running it twice for the same call has the effect of running it once (its writes are
    # keyed by the call), so a run cut off by a crash may simply run again. A tool with an
    # effect that is not idempotent is reported to the agent as "may have happened" instead,
    # and runs again only if the owner approves (engine/tool_calls.py).
    idempotent: bool = False
    # The trust of what it returns; when in doubt, outside text. A result may say otherwise
    # for itself (`meta["trust"]`: e.g. read_output returns the trust of the original).
    output_trust: OutputTrust = "untrusted"
    # What the tool reads from the store before it runs, done in the tool-call step's first
    # transaction (one trip to a thread and one transaction for both, not two); `run` finds
    # the answer in `ctx.read_before`. It must only read.
    read_before: Callable[[Session], Any] | None = None

    @property
    def safe_to_repeat(self) -> bool:
        """Whether a run cut off by a crash may run again without asking."""
        return self.effect == "read" or self.idempotent

    # Its spec, made at first use (building a pydantic class's JSON schema costs
    # milliseconds, and every model call lists every tool).
    _spec: ToolSpec | None = field(default=None, init=False, repr=False, compare=False)

    def spec(self) -> ToolSpec:
        """The tool as a model sees it once loaded."""
        if self._spec is None:
            if isinstance(self.arguments, dict):
                made = ToolSpec(self.name, self.summary, self.arguments)
            else:
                made = ToolSpec(self.name, self.summary, self.arguments.model_json_schema())
            object.__setattr__(self, "_spec", made)  # a cache on a frozen dataclass
        assert self._spec is not None
        return self._spec


# Lists a group's tools afresh (a connector connects and asks its server).
Refresh = Callable[["ToolContext"], Awaitable[list[Tool]]]


class ToolRegistry:
    """A set of tools: the built-in ones of this server (stable for the life of the process),
    or those of one owner and conversation (built-in and connectors', tools/providers.py)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._groups: dict[str, str] = {}
        self._refresh: dict[str, Refresh] = {}
        for tool in tools:
            self.add(tool)

    def add_group(self, name: str, description: str, refresh: Refresh | None = None) -> None:
        """Register a connector's group: its tools (named `<name>_...`) share one catalogue
        line under `description` instead of a line each; `refresh` lists them afresh."""
        if not name.isidentifier() or "_" in name:
            raise ValueError(f"group {name!r} must be a word of letters and digits")
        self._groups[name] = description
        if refresh is not None:
            self._refresh[name] = refresh

    def copy(self) -> ToolRegistry:
        """A registry with the same tools and groups, to add more to (the tools are shared)."""
        other = ToolRegistry()
        other._tools, other._groups = dict(self._tools), dict(self._groups)
        other._refresh = dict(self._refresh)
        return other

    def without(self, names: set[str]) -> ToolRegistry:
        """A registry with every tool but these (a helper's: no send_to_user)."""
        other = self.copy()
        for name in names:
            other._tools.pop(name, None)
        return other

    def group_of(self, name: str) -> str | None:
        """The group a tool name (or a group's own name) belongs to, if any."""
        if name in self._groups:
            return name
        return next((g for g in self._groups if name.startswith(f"{g}_")), None)

    def refresher(self, group: str) -> Refresh | None:
        """What lists a group's tools afresh (None for a fixed group)."""
        return self._refresh.get(group)

    def members(self, group: str) -> list[Tool]:
        """The tools of a group, by name."""
        return [self._tools[n] for n in self.names() if n.startswith(f"{group}_")]

    def groups(self) -> list[tuple[str, str]]:
        """(group, description) of every connector group, sorted by name."""
        return sorted(self._groups.items())

    def add(self, tool: Tool) -> None:
        """Register a tool; its schema must stay under 4,000 characters."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is registered twice")
        size = len(json.dumps(tool.spec().parameters)) + len(tool.summary)
        if size > MAX_SCHEMA_CHARS:
            raise ValueError(f"tool {tool.name!r} definition is {size} characters (limit 4000)")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool with this name, if registered."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Every tool name, sorted (a stable order keeps the prompt prefix stable)."""
        return sorted(self._tools)

    def summaries(self) -> list[tuple[str, str]]:
        """(name, one-line summary) of every tool the catalogue lists, sorted by name: not the
        tools of a group that lists them itself (a connector's: found with load_tools)."""
        return [
            (name, self._tools[name].summary)
            for name in self.names()
            if self.group_of(name) not in self._refresh
        ]

    def specs(self) -> dict[str, ToolSpec]:
        """Every tool's full definition, by name."""
        return {name: self._tools[name].spec() for name in self.names()}

    def search(self, query: str) -> list[Tool]:
        """Tools whose name matches exactly, or whose name or summary holds every query word."""
        query = query.strip().lower()
        if query in self._tools:
            return [self._tools[query]]
        words = query.replace(",", " ").split()
        found = []
        for name in self.names():
            tool = self._tools[name]
            haystack = f"{tool.name} {tool.summary}".lower().replace("_", " ")
            if words and all(word in haystack or word in tool.name for word in words):
                found.append(tool)
        return found

    def parse_arguments(self, name: str, arguments: dict[str, Any]) -> Any:
        """Validated arguments, or an error result telling the agent what to fix."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                f"There is no tool named {name!r}. Use load_tools to find the right one "
                f"(available: {', '.join(self.names())}).",
                is_error=True,
            )
        if isinstance(tool.arguments, dict):
            problems = schema_problems(tool.arguments, arguments)
            if not problems:
                return arguments
            return _invalid(tool, problems)
        try:
            return tool.arguments.model_validate(arguments)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in error.errors()
            )
            return _invalid(tool, problems)


def _invalid(tool: Tool, problems: str) -> ToolResult:
    """What the agent is told of a call whose arguments do not fit: what is wrong, and the
    tool's schema is loaded with the answer (`loaded`, as load_tools does). A model that
    called a catalogue tool without loading it has never seen the schema and guessed; told
    the schema in words, a small one guessed the same again, while a loaded schema also holds
    the local model's next call to it (models/call_schema.py)."""
    return ToolResult(
        f"The arguments for {tool.name} are invalid ({problems}). Its schema is loaded now: "
        "call it again with arguments that match it.",
        is_error=True,
        meta={"loaded": [tool.name]},
    )


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """A JSON Schema's validator, made once per schema (making one costs a millisecond)."""
    import jsonschema  # only connectors' tools need it

    schema = json.loads(schema_json)
    kind = jsonschema.validators.validator_for(schema)
    kind.check_schema(schema)  # a broken schema says so once, not at every call
    return kind(schema)


def schema_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """What is wrong with `arguments` under a JSON Schema, in a line ('' when they fit)."""
    import jsonschema

    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))[:3]
    except jsonschema.SchemaError as error:
        return f"its schema is broken: {error.message}"
    except jsonschema.exceptions.UnknownType as error:
        return f"its schema is broken: unknown type {error.type!r}"
    return "; ".join(
        f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message}" for e in errors
    )
