"""Connectors (MCP), measured in one process on SQLite with the real provider, sessions and
tool-call step:

- `tool_definition_tokens`: what five connectors (about 100 tools: server-everything and
  server-filesystem inside the sandbox, mcp-server-time, two HTTP servers of 32 tools each,
  each in a process of its own) add to a request after the conversation loaded three of
  their tools — the five catalogue lines plus the three loaded schemas (target < 3,000 and
  < 5% of all their schemas, `tool_definition_share`);
- `connect_p50_ms`: a stdio server started inside the user's sandbox, connected and its tools
  listed (server-everything, node; `connect_python_p50_ms`: mcp-server-time);
- `call_overhead_ratio`: a connector tool called through nightowl's tool-call step (provider,
  live session, records, redaction) against the same call made directly with the SDK's
  client in the same run (p50 over p50; target < 1.5).

Prints one JSON object. Needs the reference servers (`make mcp-servers`). Run
`python bench/connectors.py [--quick] [--postgres]` (`--postgres`: the store on a fresh
database of the local PostgreSQL instead of SQLite).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402
from bench.common import dbos_floor_ms, percentile  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp_types import ToolAnnotations  # noqa: E402
from tests.databases import fresh_database  # noqa: E402
from tests.server import free_port  # noqa: E402
from tests.tools.mcp.servers import EVERYTHING, FILESYSTEM, TIME, install_in_home  # noqa: E402

from nightowl.computer.computers import Computers, ComputerSettings  # noqa: E402
from nightowl.engine.preemption import RunningTurns  # noqa: E402
from nightowl.engine.tool_calls import run_tool_call  # noqa: E402
from nightowl.engine.turn_deps import TurnDeps  # noqa: E402
from nightowl.harness.guard import GuardLimits  # noqa: E402
from nightowl.harness.prompt import assemble, tool_catalogue  # noqa: E402
from nightowl.harness.sections import CHARS_PER_TOKEN  # noqa: E402
from nightowl.messages import Entry  # noqa: E402
from nightowl.metrics import Metrics  # noqa: E402
from nightowl.store.connectors import add_connector  # noqa: E402
from nightowl.store.conversations import create_conversation  # noqa: E402
from nightowl.store.database import Database  # noqa: E402
from nightowl.store.migrate import upgrade  # noqa: E402
from nightowl.store.users import create_user  # noqa: E402
from nightowl.tools.builtin import builtin_registry  # noqa: E402
from nightowl.tools.loading import LoadToolsArgs  # noqa: E402
from nightowl.tools.mcp.connections import CallScope, Connections  # noqa: E402
from nightowl.tools.mcp.http import HttpTransports  # noqa: E402
from nightowl.tools.mcp.provider import ConnectorProvider  # noqa: E402
from nightowl.tools.providers import Toolbox  # noqa: E402
from nightowl.tools.registry import ToolContext, ToolRegistry  # noqa: E402

UID_BASE = 3_600_000
LOADED = ["everything_echo", "files_read_text_file", "crm_find_contact"]
AREAS = ["contact", "deal", "invoice", "ticket", "project", "task", "calendar", "file"]
VERBS = ["find", "create", "update", "delete"]


def _synthetic(name: str) -> MCPServer:
    """An HTTP MCP server with 32 tools whose schemas look like a SaaS API's."""
    server = MCPServer(name)
    for area in AREAS:
        for verb in VERBS:
            tool_name = f"{verb}_{area}"

            def run(query: str, limit: int = 10, fields: list[str] | None = None) -> str:
                return f"{len(query)} results"

            run.__doc__ = (
                f"{verb.capitalize()} a {area} in the {name} account by name, e-mail or id; "
                f"returns the matching {area} records with their owner, status and dates."
            )
            read = ToolAnnotations(readOnlyHint=verb == "find")
            server.add_tool(run, name=tool_name, annotations=read)
    return server


class HttpServer:
    """A synthetic MCP server (`_synthetic`) on 127.0.0.1, in a process of its own as a
    connector always is: in a thread of this process it would share the GIL with the worker
    threads nightowl's step hands its store work to, a cost no deployment pays."""

    def __init__(self, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._command = [sys.executable, __file__, "--serve", name, str(self.port)]
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> HttpServer:
        self._process = subprocess.Popen(self._command)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the MCP server {self._command} did not start") from None
                time.sleep(0.05)

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)


def _serve(name: str, port: int) -> None:
    app: Any = _synthetic(name).streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _tokens(chars: int) -> int:
    return chars // CHARS_PER_TOKEN


def _schema_chars(registry: ToolRegistry, name: str) -> int:
    spec = registry.specs()[name]
    return len(json.dumps([spec.name, spec.description, spec.parameters]))


async def definition_tokens(
    toolbox: Toolbox, provider: ConnectorProvider, ctx: ToolContext, database: Database
) -> dict[str, Any]:
    """Tokens the five connectors add to a request after three of their tools were loaded."""
    with database.read() as session:
        registry = toolbox.for_conversation(session, ctx.conversation_id)
    groups = registry.groups()
    connector_tools = [n for n in registry.names() if registry.group_of(n)]
    history = [Entry(kind="user", text="find the Acme contact", trust="owner")]
    load = registry.get("load_tools")
    assert load is not None
    for name in LOADED:
        result = await load.run(LoadToolsArgs(query=name), ctx)
        assert not result.is_error, result.content
        history.append(
            Entry(kind="tool_result", text=result.content, tool_name="load_tools", meta=result.meta)
        )
    request = assemble(registry.summaries(), registry.specs(), history, groups=groups)
    catalogue = tool_catalogue([], groups)
    loaded = [s for s in request.tools if registry.group_of(s.name)]
    added = len(catalogue) + sum(
        len(json.dumps([s.name, s.description, s.parameters])) for s in loaded
    )
    everything = sum(_schema_chars(registry, n) for n in connector_tools)
    builtin = len(tool_catalogue(registry.summaries())) + sum(
        len(json.dumps([s.name, s.description, s.parameters]))
        for s in request.tools
        if not registry.group_of(s.name)
    )
    return {
        "connectors": len(groups),
        "connector_tools": len(connector_tools),
        "tool_definition_tokens": _tokens(added),
        "all_connector_schema_tokens": _tokens(everything),
        "tool_definition_share": round(added / everything, 4),
        "builtin_tool_definition_tokens": _tokens(builtin),
    }


async def connect_ms(
    provider: ConnectorProvider, computers: Computers, owner: str, name: str, rounds: int
) -> list[float]:
    """A stdio server started in the sandbox, connected and listed, from no session."""
    from nightowl.store.connectors import get_connector

    with provider.database.read() as session:
        connector = get_connector(session, owner, name)
    sandbox = await computers.acquire(owner, "bench")
    samples = []
    try:
        for _ in range(rounds):
            await provider.connections.close_connector(owner, name)
            started = time.perf_counter()
            await provider.list_now(connector, sandbox, CallScope(owner))
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        await computers.release("bench")
    return samples


async def call_overhead(
    deps: TurnDeps, registry: ToolRegistry, owner: str, conversation: str, url: str, rounds: int
) -> tuple[list[float], list[float]]:
    """The same call through nightowl's tool-call step and directly with the SDK."""
    through, direct = [], []
    arguments = {"query": "Acme"}
    call = {"id": "c", "name": "crm_find_contact", "arguments": arguments}
    await run_tool_call(deps, registry, "bench-warm", conversation, owner, "0.0", call)
    async with Client(streamable_http_client(url), mode="legacy") as client:
        await client.call_tool("find_contact", arguments)
        for n in range(rounds):
            started = time.perf_counter()
            outcome = await run_tool_call(
                deps, registry, "bench", conversation, owner, f"{n}.0", {**call, "id": f"c{n}"}
            )
            through.append((time.perf_counter() - started) * 1000)
            assert not outcome.is_error
            started = time.perf_counter()
            result = await client.call_tool("find_contact", arguments)
            direct.append((time.perf_counter() - started) * 1000)
            assert not result.is_error
    return through, direct


async def main(quick: bool, backend: str = "sqlite") -> dict[str, Any]:
    rounds = 5 if quick else 20
    # The SDK logs every HTTP request at info (through rich): a cost the server does not pay.
    logging.disable(logging.INFO)
    with (
        tempfile.TemporaryDirectory(prefix="nightowl-bench-") as folder,
        fresh_database(backend, Path(folder)) as url,
    ):
        base = Path(folder)
        database = Database(url)
        upgrade(database)
        computers = Computers(
            ComputerSettings(
                homes_dir=base / "homes",
                snapshot_dir=base / "blobs",
                network="none",
                uid_base=UID_BASE,
            ),
            database,
        )
        connections = Connections(open_http=HttpTransports(database, None).open)
        provider = ConnectorProvider(database, connections)
        toolbox = Toolbox(builtin_registry(), [provider])
        with HttpServer("crm") as crm, HttpServer("helpdesk") as desk:
            with database.write() as session:
                owner = create_user(session, "bench").id
                conversation = create_conversation(session, owner).id
                for name, command in (
                    ("everything", EVERYTHING),
                    ("files", [*FILESYSTEM, "/home/agent"]),
                    ("time", TIME),
                ):
                    add_connector(session, owner, name, command=command)
                add_connector(session, owner, "crm", url=crm.url, description="Our CRM.")
                add_connector(session, owner, "helpdesk", url=desk.url, description="Tickets.")
            install_in_home(base / "homes" / owner)
            ctx = ToolContext(
                database=database,
                blob_dir=base / "blobs",
                conversation_id=conversation,
                owner_id=owner,
                turn_id="bench",
                call_id="load",
                home=base / "homes" / owner,
                computers=computers,
            )
            try:
                # Every connector listed once (the first load_tools of each would do it).
                sandbox = await computers.acquire(owner, "bench-list")
                from nightowl.store.connectors import connectors_of

                with database.read() as session:
                    every = connectors_of(session, owner)
                for connector in every:
                    await provider.list_now(
                        connector, sandbox if connector.command else None, CallScope(owner)
                    )
                with database.read() as session:
                    ctx = ToolContext(
                        **{**vars(ctx), "tools": toolbox.for_conversation(session, conversation)}
                    )
                report = await definition_tokens(toolbox, provider, ctx, database)
                await computers.release("bench-list")
                node = await connect_ms(provider, computers, owner, "everything", rounds)
                python = await connect_ms(provider, computers, owner, "time", max(3, rounds // 4))
                deps = TurnDeps(
                    database=database,
                    metrics=Metrics(),
                    model=None,
                    tools=toolbox,
                    limits=GuardLimits(),
                    blob_dir=base / "blobs",
                    schedule_timer=_no_timer,
                    running=RunningTurns(),
                    homes_dir=base / "homes",
                    computers=computers,
                )
                assert ctx.tools is not None
                through, direct = await call_overhead(
                    deps, ctx.tools, owner, conversation, crm.url, rounds * 5
                )
                # The floor of any durable step here: DBOS's own empty step on the same
                # kind of store, and the ratio the direct call would reach inside one (the
                # target is below it when a bare step costs more than half the call).
                floor = dbos_floor_ms(url if backend == "postgresql" else "")
            finally:
                await connections.close()
                computers.close()
                database.dispose()
                shutil.rmtree(base / "homes", ignore_errors=True)
    report["store"] = backend
    report["connect_p50_ms"] = round(percentile(node, 50), 1)
    report["connect_python_p50_ms"] = round(percentile(python, 50), 1)
    report["call_through_step_p50_ms"] = round(percentile(through, 50), 2)
    report["call_direct_sdk_p50_ms"] = round(percentile(direct, 50), 2)
    report["call_overhead_ratio"] = round(percentile(through, 50) / percentile(direct, 50), 2)
    report["dbos_empty_step_p50_ms"] = floor
    report["direct_in_dbos_step_ratio"] = round(
        (percentile(direct, 50) + floor) / percentile(direct, 50), 2
    )
    report["targets_met"] = {
        "tool_definition_tokens_under_3000": report["tool_definition_tokens"] < 3000,
        "tool_definition_share_under_5_percent": report["tool_definition_share"] < 0.05,
        "call_overhead_ratio_under_1_5": report["call_overhead_ratio"] < 1.5,
    }
    return report


async def _no_timer(*_: Any) -> None:
    return None


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    store = "postgresql" if "--postgres" in sys.argv else "sqlite"
    print(json.dumps(asyncio.run(main("--quick" in sys.argv, store)), indent=2))
