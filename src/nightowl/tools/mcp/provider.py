"""Connectors as a tool provider: each connector the conversation may use is a group with one
catalogue line, its tools built from what the server listed last (schemas as JSON Schema,
effects from annotations and the owner's overrides), run through the live session.

A tool's result is outside text unless the owner trusts the connector. Each result names the
connector (`meta["connector"]`): while its last call failed, the browser, the shell and
web_fetch may not reach the same service instead (safety/policy.py).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import SandboxError
from nightowl.harness.tool_pins import ToolChange, changes_key, package_change, unapproved
from nightowl.store.connectors import (
    ConnectorInfo,
    connector_to_call,
    conversation_connector,
    conversation_connectors,
    get_connector,
    record_failure,
    record_listing,
    record_package,
)
from nightowl.store.conversations import latest_conversation_id
from nightowl.store.database import Database
from nightowl.store.outbox import deliver_to_user
from nightowl.tools.mcp.connections import (
    CallScope,
    Connections,
    ConnectorError,
)
from nightowl.tools.mcp.listing import (
    effect_of,
    result_text,
    stored_tool,
    summary_of,
    tool_name,
)
from nightowl.tools.providers import ToolGroup
from nightowl.tools.registry import MAX_SCHEMA_CHARS, Tool, ToolContext, ToolResult

log = logging.getLogger(__name__)


def describe(connector: ConnectorInfo) -> str:
    """The catalogue line's text: what the connector is for (the owner's words, or its
    server's), and how to see its tools."""
    what = connector.description.strip() or f"The {connector.name} connector."
    return f"{what} (MCP connector; load_tools {connector.name} lists its tools)"


def service_of(connector: ConnectorInfo) -> dict[str, Any]:
    """How a result names its connector for the workaround rule: its name and its host."""
    host = urlsplit(connector.url).hostname if connector.url else None
    return {"service": connector.name, "hosts": [host] if host else []}


def failure_text(connector: ConnectorInfo, error: ConnectorError) -> str:
    """What the agent is told when a connector fails: what failed, and to tell the owner."""
    if error.status == "authorize":
        return (
            f"The connector {connector.name} needs the owner to authorise it again ({error}). "
            "Tell the owner: open Connectors in the web app and press Authorise, or run "
            f"`nightowl connectors authorize {connector.name}`. Do not try to reach "
            f"{connector.name} another way (browser, shell, web_fetch)."
        )
    return (
        f"The connector {connector.name} failed: {error}. Tell the owner what failed (they "
        f"can check it with `nightowl connectors test {connector.name}`). Do not try to reach "
        f"{connector.name} another way (browser, shell, web_fetch)."
    )


def _shown_name(name: str) -> str:
    """A tool's name as the server gave it, safe to show: a word, at most 64 characters (the
    server chose it: it must not carry sentences into a notice)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "?", name)
    return cleaned if len(cleaned) <= 64 else cleaned[:63] + "…"


def held_notice(name: str, changes: list[ToolChange]) -> str:
    """The owner's notice of tools held for approval (names only: what the server now says
    of them is outside text, shown in the diff)."""
    changed = [_shown_name(c.name) for c in changes if c.kind == "changed"]
    new = [_shown_name(c.name) for c in changes if c.kind == "new"]
    parts = []
    if changed:
        parts.append(f"changed since you approved them: {', '.join(changed)}")
    if new:
        parts.append(f"new: {', '.join(new)}")
    return (
        f"The connector {name} lists tools that differ from what you approved ("
        + "; ".join(parts)
        + "). They are not offered to the agent until you approve them: see the change with "
        f"`nightowl connectors diff {name}` (or on the Connectors page), then "
        f"`nightowl connectors approve {name}`."
    )


def _fits(tool: Tool) -> bool:
    """Whether a connector tool is small enough for a definition (one that is not is left
    out of the conversation's tools)."""
    if len(str(tool.arguments)) + len(tool.summary) <= MAX_SCHEMA_CHARS:
        return True
    log.info("a connector tool's schema is too large", extra={"tool": tool.name})
    return False


@dataclass(frozen=True)
class _Settings:
    """A connector's settings as a call read them (None: the owner removed it meanwhile)."""

    connector: ConnectorInfo | None


class ConnectorProvider:
    """The user's MCP connectors, as tool groups."""

    def __init__(self, database: Database, connections: Connections) -> None:
        self.database = database
        self.connections = connections
        connections.on_tools_changed = self._relist
        connections.check_package = self._check_package
        self._changes = 0

    def changes(self) -> int:
        """How many listings this process stored (a run re-reads its tools when it grows)."""
        return self._changes

    async def _check_package(self, connector: ConnectorInfo, probed: dict[str, Any]) -> None:
        """Pin what a stdio server runs at its first start; refuse a start whose package
        differs from the pin, until the owner approves the change."""

        def record() -> ConnectorInfo:
            with self.database.write() as session:
                return record_package(session, connector.owner_id, connector.name, probed)

        stored = await asyncio.to_thread(record)
        change = package_change(stored.package, probed)
        if change is not None:
            raise ConnectorError(
                f"{connector.name} was not started: what its command runs changed since you "
                f"added it ({change}). Nothing of it runs until you approve the change: "
                f"`nightowl connectors diff {connector.name}`, then "
                f"`nightowl connectors approve {connector.name}`."
            )

    def note_change(self) -> None:
        """What the connectors offer changed in the store (the owner approved tools)."""
        self._changes += 1

    def groups(self, session: Session, conversation_id: str) -> list[ToolGroup]:
        """One group per connector the conversation may use."""
        _, connectors = conversation_connectors(session, conversation_id)
        return [
            ToolGroup(
                connector.name,
                describe(connector),
                self.tools_of(connector),
                refresh=self._refresher(connector.name),
            )
            for connector in connectors
        ]

    def tools_of(self, connector: ConnectorInfo) -> list[Tool]:
        """The connector's tools as last listed and as the owner approved them (one held for
        a change, or too large for a definition, is left out)."""
        tools = []
        for listed in connector.offered():
            tool = self._tool(connector, listed)
            if _fits(tool):
                tools.append(tool)
        return tools

    def tool(self, session: Session, conversation_id: str, name: str) -> Tool | None:
        """One tool the conversation may use, by the name a call gives (the safety gate's
        lookup at every call): only the connector the name starts with is read, and only
        that tool is built. The same tool `groups` gives, when it gives one."""
        # A connector's name has no underscore (store/connectors.py: NAME), so the part of
        # the tool's name before the first one is its connector.
        connector = conversation_connector(session, conversation_id, name.split("_", 1)[0])
        if connector is None:
            return None
        for listed in connector.offered():
            if tool_name(connector.name, str(listed["name"])) == name:
                tool = self._tool(connector, listed)
                if _fits(tool):
                    return tool
        return None

    def _tool(self, connector: ConnectorInfo, listed: dict[str, Any]) -> Tool:
        mcp_name = str(listed["name"])
        name = tool_name(connector.name, mcp_name)
        annotations = dict(listed.get("annotations") or {})
        owner = connector.owner_id
        schema = dict(listed.get("schema") or {"type": "object"})

        async def run(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await self.call(owner, connector.name, mcp_name, arguments, ctx)

        def read_before(session: Session) -> _Settings:
            return _Settings(connector_to_call(session, owner, connector.name))

        return Tool(
            name=name,
            summary=summary_of(str(listed.get("description") or "")),
            effect=effect_of(annotations, connector.effects.get(mcp_name)),
            arguments=schema,
            run=run,
            activity=f"using {connector.name}",
            idempotent=annotations.get("idempotent_hint") is True,
            output_trust="agent" if connector.trusted else "untrusted",
            read_before=read_before,
        )

    async def call(
        self, owner_id: str, name: str, tool: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        """Run one tool of the connector in the owner's session, with its settings as they are
        now (read in the tool-call step's first transaction, or here when it ran outside)."""
        if isinstance(ctx.read_before, _Settings):
            connector = ctx.read_before.connector
        else:
            connector = await asyncio.to_thread(self._load_to_call, owner_id, name)
        if connector is None:
            return ToolResult(
                f"The connector {name} was removed. Tell the owner if you need it.",
                is_error=True,
                meta={"trust": "agent"},
            )
        scope = CallScope(owner_id, ctx.conversation_id, ctx.turn_id)
        try:
            sandbox = await self._sandbox(connector, ctx)
            done = await self.connections.call_tool(connector, sandbox, scope, tool, arguments)
        except ConnectorError as error:
            await asyncio.to_thread(self._failed, connector, error)
            return ToolResult(
                failure_text(connector, error),
                is_error=True,
                meta={"connector": service_of(connector), "trust": "agent"},
            )
        if done.tools_now is not None:  # the conversation hears of it in its next note
            await self._store(connector, done.tools_now, scope)
        result = done.result
        meta: dict[str, Any] = {"connector": service_of(connector)}
        if result.is_error:
            # The tool ran and said no (bad input, say): the connector itself works.
            meta = {}
        return ToolResult(result_text(result), is_error=result.is_error, meta=meta)

    async def _sandbox(self, connector: ConnectorInfo, ctx: ToolContext) -> Computer | None:
        if connector.transport != "stdio":
            return None
        try:
            return await ctx.sandbox()  # in this process, or on a computer host
        except SandboxError as error:
            raise ConnectorError(f"no computer is available to run it ({error})") from error

    async def list_now(
        self, connector: ConnectorInfo, sandbox: Computer | None, scope: CallScope
    ) -> ConnectorInfo:
        """Connect (if needed), list the server's tools and store them; the connector as
        stored now (ConnectorError when it fails, recorded too)."""
        try:
            tools = await self.connections.list_tools(connector, sandbox, scope)
        except ConnectorError as error:
            await asyncio.to_thread(self._failed, connector, error)
            raise
        return await self._store(connector, tools, scope)

    async def _store(
        self, connector: ConnectorInfo, tools: list[Any], scope: CallScope
    ) -> ConnectorInfo:
        """Store what the server listed; the connector as stored now. Tools that changed
        since the owner approved them are held, and the conversation that listed them (or,
        listed outside any, the owner's most recent one) gets a notice for the owner, once
        per set of changes."""
        listed = [stored_tool(t) for t in tools]

        def save() -> ConnectorInfo:
            with self.database.write() as session:
                stored = record_listing(session, connector.owner_id, connector.name, listed)
                where = scope.conversation_id or (
                    latest_conversation_id(session, connector.owner_id) if stored.held else None
                )
                if stored.held and where:
                    changes = unapproved(stored.tools, stored.pinned)
                    deliver_to_user(
                        session,
                        where,
                        key=f"connector-change:{connector.name}:{changes_key(changes)}",
                        body=held_notice(connector.name, changes),
                        turn_id=scope.turn_id or None,
                        role="notice",
                        meta={"important": True},
                    )
                return stored

        stored = await asyncio.to_thread(save)
        self._changes += 1  # after the commit: a run that sees it reads the new listing
        return stored

    def _refresher(self, name: str) -> Any:
        async def refresh(ctx: ToolContext) -> list[Tool]:
            connector = await asyncio.to_thread(self._load, ctx.owner_id, name)
            if connector is None:
                return []
            scope = CallScope(ctx.owner_id, ctx.conversation_id, ctx.turn_id)
            sandbox = await self._sandbox(connector, ctx)
            return self.tools_of(await self.list_now(connector, sandbox, scope))

        return refresh

    async def _relist(self, connector: ConnectorInfo) -> None:
        """A server said its tools changed: list them again (the conversation hears of it
        in a note, harness/connectors.py)."""
        sandbox = self.connections.sandbox_of(connector.owner_id, connector.name)
        try:
            await self.list_now(connector, sandbox, CallScope(connector.owner_id))
        except ConnectorError:
            log.info("listing a connector's changed tools failed", extra={"c": connector.name})

    def _load(self, owner_id: str, name: str) -> ConnectorInfo | None:
        with self.database.read() as session:
            try:
                return get_connector(session, owner_id, name)
            except Exception:
                return None

    def _load_to_call(self, owner_id: str, name: str) -> ConnectorInfo | None:
        with self.database.read() as session:
            return connector_to_call(session, owner_id, name)

    def _failed(self, connector: ConnectorInfo, error: ConnectorError) -> None:
        with self.database.write() as session:
            record_failure(session, connector.owner_id, connector.name, error.status, str(error))
