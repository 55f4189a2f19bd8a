"""`connectors test`: connect to a connector now, list its tools, and say what failed and what
to do about it (for the owner: the CLI, the API and the web app)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nightowl.computer.protocol import ComputerPool
from nightowl.computer.sandbox import SandboxError
from nightowl.store.connectors import ConnectorInfo
from nightowl.tools.mcp.connections import CallScope, ConnectorError
from nightowl.tools.mcp.provider import ConnectorProvider


@dataclass(frozen=True)
class TestReport:
    """What a test of a connector found."""

    ok: bool
    tools: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    advice: str = ""
    # Listed tools held until the owner approves them (changed since approved, or new).
    held: list[str] = field(default_factory=list)


def advice_for(connector: ConnectorInfo, status: str) -> str:
    """What the owner can do about a failure."""
    if status == "authorize":
        return (
            f"Authorise nightowl with the server: `nightowl connectors authorize "
            f"{connector.name}` or Authorise on the Connectors page of the web app."
        )
    if connector.transport == "stdio":
        return (
            "The command runs inside your computer (as your agent's shell does), with your "
            "home as its folder: make sure it is installed there and starts from that folder, "
            "e.g. try it with the agent's shell."
        )
    return (
        "Check the URL, that the server is up and reachable from this server, and that any "
        "secret its headers name is in the vault (`nightowl secrets list`)."
    )


async def test_connector(
    provider: ConnectorProvider, computers: ComputerPool | None, connector: ConnectorInfo
) -> TestReport:
    """Connect (a stdio server inside the owner's computer), list the tools, report."""
    holder = f"connector-test:{connector.owner_id}:{connector.name}"
    sandbox = None
    try:
        if connector.transport == "stdio":
            if computers is None:
                raise ConnectorError("this server runs without a computer")
            try:
                sandbox = await computers.acquire(connector.owner_id, holder)
            except SandboxError as error:
                raise ConnectorError(f"your computer could not start: {error}") from error
        listed = await provider.list_now(connector, sandbox, CallScope(connector.owner_id))
    except ConnectorError as error:
        return TestReport(False, error=str(error), advice=advice_for(connector, error.status))
    finally:
        if computers is not None and sandbox is not None:
            await computers.release(holder)
    tools = [
        {"name": t.name, "effect": t.effect, "summary": t.summary}
        for t in provider.tools_of(listed)
    ]
    return TestReport(True, tools=tools, held=listed.held)
