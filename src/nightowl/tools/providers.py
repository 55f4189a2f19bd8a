"""The tool-provider seam: every source of tools contributes groups per owner and conversation
at run time, and the toolbox puts them together with the built-in tools.

A provider's tools are plain `Tool`s (a pydantic class or a JSON Schema each, an effect, an
output trust), so every call of any of them runs through the one tool-call step and the safety
gate. Built-in tools are the fixed part; MCP connectors (tools/mcp/) are a provider.

The lookup reads stored state only (a connector's last listed tools): building a conversation's
tools never connects anywhere, so the prompt can be assembled from it at every model call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy.orm import Session

from nightowl.tools.registry import Refresh, Tool, ToolRegistry


@dataclass(frozen=True)
class ToolGroup:
    """Tools a provider contributes under one name: one catalogue line (`<name>_*`)."""

    name: str
    description: str
    tools: list[Tool] = field(default_factory=list)
    # Lists the tools afresh (a connector connects); None when the group is fixed.
    refresh: Refresh | None = None


class ToolProvider(Protocol):
    """A source of tools for one owner and conversation."""

    def groups(self, session: Session, conversation_id: str) -> list[ToolGroup]:
        """The groups the conversation (and so its owner) may use now, from stored state."""
        ...

    def changes(self) -> int:
        """A count that grows whenever this process stored new tools of the provider (a
        connector listed its tools): a run's kept tools are looked up again when it moved."""
        ...

    def tool(self, session: Session, conversation_id: str, name: str) -> Tool | None:
        """One tool of the conversation's groups by name (None: it has none by that name),
        found without building every group."""
        ...


class Toolbox:
    """The built-in tools and every provider's, per owner and conversation."""

    def __init__(self, builtin: ToolRegistry, providers: list[ToolProvider] | None = None) -> None:
        self.builtin = builtin
        self.providers = list(providers or [])

    def get(self, name: str) -> Tool | None:
        """A built-in tool by name (the same for every conversation)."""
        return self.builtin.get(name)

    def changes(self) -> int:
        """How often the providers' stored tools changed in this process (see
        `ToolProvider.changes`)."""
        return sum(provider.changes() for provider in self.providers)

    def for_conversation(self, session: Session, conversation_id: str) -> ToolRegistry:
        """Every tool the conversation may use: the built-in ones, then each provider's."""
        if not self.providers:
            return self.builtin
        registry = self.builtin.copy()
        for provider in self.providers:
            for group in provider.groups(session, conversation_id):
                registry.add_group(group.name, group.description, group.refresh)
                for tool in group.tools:
                    if registry.get(tool.name) is None:
                        registry.add(tool)
        return registry

    def lookup(self, session: Session, conversation_id: str, name: str) -> Tool | None:
        """The tool a conversation's call names: built-in, or a provider's (the first whose
        groups have it, as in `for_conversation`)."""
        found = self.builtin.get(name)
        for provider in self.providers:
            if found is not None:
                break
            found = provider.tool(session, conversation_id, name)
        return found
