"""A connector's call reads the connector's settings as they are now, in the tool-call step's
first transaction (not a trip of its own): a run that keeps its tools still reaches the server
the owner set since, and stops reaching one the owner removed. And what that transaction reads
before a tool runs: the step's committed result, its run's status, an unfinished earlier run."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from nightowl.engine.preemption import RunningTurns
from nightowl.engine.tool_calls import run_tool_call
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.guard import GuardLimits
from nightowl.metrics import Metrics
from nightowl.store.connectors import add_connector, connectors_of, drop_connector
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.step_results import record_result
from nightowl.store.tool_steps import tool_step_state
from nightowl.store.transcript import finish_tool_run, load_turn_entries, start_tool_run
from nightowl.store.turns import finish_turn, queue_turn
from nightowl.store.users import create_user
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.mcp.connections import CallScope, Connections
from nightowl.tools.mcp.http import HttpTransports
from nightowl.tools.mcp.provider import ConnectorProvider
from nightowl.tools.providers import Toolbox
from tests.server import free_port


class CrmServer:
    """A streamable-HTTP MCP server on 127.0.0.1 (in a thread) whose one tool says which
    server answered, and counts its calls."""

    def __init__(self, label: str) -> None:
        self.calls = 0
        server = MCPServer(f"crm-{label}")

        def find_contact(query: str) -> str:
            """Find a contact by name."""
            self.calls += 1
            return f"{label} found {query}"

        server.add_tool(find_contact, annotations=ToolAnnotations(readOnlyHint=True))
        self.url = f"http://127.0.0.1:{free_port()}/mcp"
        port = int(self.url.split(":")[2].split("/")[0])
        config = uvicorn.Config(
            server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> CrmServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


async def _no_timer(*_: Any) -> None:
    return None


def test_a_call_uses_the_connector_as_the_owner_set_it_now(
    database: Database, tmp_path: Path
) -> None:
    connections = Connections(open_http=HttpTransports(database, None).open)
    provider = ConnectorProvider(database, connections)
    toolbox = Toolbox(builtin_registry(), [provider])
    deps = TurnDeps(
        database=database,
        metrics=Metrics(),
        model=None,
        tools=toolbox,
        limits=GuardLimits(),
        blob_dir=tmp_path / "blobs",
        schedule_timer=_no_timer,
        running=RunningTurns(),
        homes_dir=tmp_path / "homes",
    )
    call = {"id": "c", "name": "crm_find_contact", "arguments": {"query": "Acme"}}

    async def scenario(first: CrmServer, second: CrmServer) -> list[Any]:
        with database.write() as session:
            owner = create_user(session, "owner").id
            conversation = create_conversation(session, owner).id
            add_connector(session, owner, "crm", url=first.url)
        with database.read() as session:
            (connector,) = connectors_of(session, owner)
        await provider.list_now(connector, None, CallScope(owner))
        with database.read() as session:  # the run's tools, kept for the whole run
            tools = toolbox.for_conversation(session, conversation)
        outcomes = []

        async def call_once(slot: str) -> None:
            await run_tool_call(deps, tools, "turn", conversation, owner, slot, call)
            with database.read() as session:
                outcomes.append(load_turn_entries(session, "turn")[-1].to_dict())

        await call_once("1.0")
        with database.write() as session:  # the owner points it at another server
            drop_connector(session, owner, "crm")
            add_connector(session, owner, "crm", url=second.url)
        await call_once("2.0")
        with database.write() as session:  # and then removes it
            drop_connector(session, owner, "crm")
        await call_once("3.0")
        await connections.close()
        return outcomes

    with CrmServer("first") as first, CrmServer("second") as second:
        before, moved, removed = asyncio.run(scenario(first, second))
        assert (first.calls, second.calls) == (1, 1)
    assert before["text"] == "first found Acme" and not before["is_error"]
    assert moved["text"] == "second found Acme" and not moved["is_error"]
    assert removed["is_error"]
    assert "The connector crm was removed" in removed["text"]


def test_what_a_tool_step_reads_before_its_tool_runs(database: Database) -> None:
    with database.write() as session:
        owner = create_user(session, "owner").id
        conversation = create_conversation(session, owner).id
        turn, _ = queue_turn(session, conversation, 1)
        nothing = tool_step_state(session, "k1", turn.id)
        unknown = tool_step_state(session, "k1", "no-such-run")
        run_id = start_tool_run(session, conversation, turn.id, "c", "crm_x", "read", "k1")
    with database.write() as session:
        started = tool_step_state(session, "k1", turn.id)
        finish_tool_run(session, run_id, False)
        record_result(session, "k1", None)  # a step may return None itself
        record_result(session, "k2", {"is_error": False, "text": "ok"})
        finish_turn(session, turn.id, status="stopped")
    with database.write() as session:
        finished = tool_step_state(session, "k1", turn.id)
        other = tool_step_state(session, "k2", turn.id)
    assert nothing.recorded is None and not nothing.unfinished
    assert nothing.run_status == "queued" and unknown.run_status is None
    assert started.unfinished and started.recorded is None
    assert finished.recorded is not None and finished.recorded.value is None
    assert not finished.unfinished and finished.run_status == "stopped"
    assert other.recorded is not None and other.recorded.value == {"is_error": False, "text": "ok"}
