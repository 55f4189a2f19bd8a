"""Tools: name, one-line summary, argument schema, declared effect, and how to run them."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from nightowl.computer.sandbox import Sandbox, SandboxError
from nightowl.models.base import ToolSpec
from nightowl.store.database import Database

if TYPE_CHECKING:
    from nightowl.computer.computers import Computers

Effect = Literal["read", "write", "send", "spend"]
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
    computers: Computers | None = None

    async def sandbox(self) -> Sandbox:
        """The owner's sandbox, awake and held for this turn (SandboxError when unavailable)."""
        if self.computers is None:
            raise SandboxError("this server runs without a computer (no sandbox backend)")
        return await self.computers.acquire(self.owner_id, self.turn_id)


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
    arguments: type[BaseModel]
    run: Callable[[Any, ToolContext], Awaitable[ToolResult]]
    # What the owner sees while it runs ("reading a web page"); never the model's own words.
    activity: str = "working"

    def spec(self) -> ToolSpec:
        """The tool as a model sees it once loaded."""
        return ToolSpec(self.name, self.summary, self.arguments.model_json_schema())


class ToolRegistry:
    """The set of tools of this server; stable for the life of the process."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._groups: dict[str, str] = {}
        for tool in tools:
            self.add(tool)

    def add_group(self, name: str, description: str) -> None:
        """Register a connector's group: its tools (named `<name>_...`) share one catalogue
        line under `description` instead of a line each."""
        if not name.isidentifier() or "_" in name:
            raise ValueError(f"group {name!r} must be a word of letters and digits")
        self._groups[name] = description

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
        """(name, one-line summary) of every tool, sorted by name."""
        return [(name, self._tools[name].summary) for name in self.names()]

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

    def parse_arguments(self, name: str, arguments: dict[str, Any]) -> BaseModel | ToolResult:
        """Validated arguments, or an error result telling the agent what to fix."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                f"There is no tool named {name!r}. Use load_tools to find the right one "
                f"(available: {', '.join(self.names())}).",
                is_error=True,
            )
        try:
            return tool.arguments.model_validate(arguments)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in error.errors()
            )
            return ToolResult(
                f"The arguments for {name} are invalid ({problems}). "
                "Call it again with arguments that match its schema.",
                is_error=True,
            )
