"""nightowl as an MCP server: a streamable-HTTP endpoint at `/mcp`, so other agents and tools
(an IDE's agent, another nightowl) can hand work to this one.

A caller authenticates with a nightowl access token (`Authorization: Bearer`), and sees only
its user's conversations. `start_task` is a trigger of source `agent` through the router,
like any other: trusted as the owner's own words only when the token is the owner's, outside
text otherwise. `read_task` reports progress (what the agent is doing) and what it said since.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import secrets
from typing import Any

from fastapi import FastAPI
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.types import ASGIApp, Receive, Scope, Send

from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import (
    create_conversation,
    get_conversation,
    list_conversations,
    messages_after,
)
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.turns import activities
from nightowl.store.users import UserInfo, user_for_token

PATH = "/mcp"
MAX_TASK_CHARS = 32_000
_caller: contextvars.ContextVar[UserInfo | None] = contextvars.ContextVar(
    "mcp_caller", default=None
)


def _user() -> UserInfo:
    user = _caller.get()
    if user is None:  # the endpoint sets it for every request; a tool never runs without
        raise PermissionError("not authenticated")
    return user


def build_mcp_server(app: FastAPI) -> MCPServer:
    """The MCP server's tools, over the app's store and router."""
    mcp = MCPServer(
        "nightowl",
        instructions="Hand work to a nightowl agent: start_task, then read_task for its "
        "progress and result; list_conversations shows where work can go.",
    )

    def conversation_of(session: Any, conversation_id: str, user: UserInfo) -> Any:
        try:
            return get_conversation(session, conversation_id, user.id)
        except NotFound as error:  # the caller's words, not the SDK's "error executing"
            raise ToolError(f"{error}: list_conversations shows yours") from None

    def database() -> Database:
        found: Database = app.state.database
        return found

    @mcp.tool(
        description="Start a task for the agent: in a new conversation, or in one of "
        "yours (conversation_id). Returns where to read its progress and result."
    )
    async def start_task(
        text: str, conversation_id: str | None = None, task_id: str | None = None
    ) -> dict[str, Any]:
        user = _user()
        if not text.strip() or len(text) > MAX_TASK_CHARS:
            raise ValueError(f"text must be 1-{MAX_TASK_CHARS} characters")

        def start() -> dict[str, Any]:
            with database().write() as session:
                if conversation_id:
                    conversation = conversation_of(session, conversation_id, user)
                else:
                    conversation = create_conversation(
                        session, user.id, channel="mcp", title=text.strip()[:80]
                    )
            router: Router = app.state.router
            key = task_id or secrets.token_hex(12)
            accepted = router.accept(
                IncomingMessage(
                    source="agent",
                    idempotency_key=f"{conversation.id}:{key}",
                    conversation_id=conversation.id,
                    text=text,
                    # Another agent's words are outside text, unless it holds the owner's token.
                    trust="owner" if user.role == "owner" else "untrusted",
                    priority=Priority.GROUP,
                    author_id=user.id,
                )
            )
            message = accepted.message
            return {
                "conversation_id": conversation.id,
                "message_id": message.id,
                "seq": message.seq,
                "duplicate": accepted.duplicate,
            }

        return await asyncio.to_thread(start)

    @mcp.tool(
        description="A task's progress and result: what the agent is doing now and "
        "what it said after the task's message (pass the seq start_task returned)."
    )
    async def read_task(conversation_id: str, seq: int = 0) -> dict[str, Any]:
        user = _user()

        def read() -> dict[str, Any]:
            with database().read() as session:
                conversation = conversation_of(session, conversation_id, user)
                later = messages_after(session, conversation.id, seq, 200)
                doing = activities(session, [conversation.id]).get(conversation.id, "")
            said = [
                {"seq": m.seq, "text": m.body, "at": m.created_at.isoformat()}
                for m in later
                if m.role in ("agent", "notice")
            ]
            return {"status": "working" if doing else "idle", "activity": doing, "messages": said}

        return await asyncio.to_thread(read)

    @mcp.tool(
        name="list_conversations",
        description="Your conversations with the agent (id, title, what it is doing).",
    )
    async def list_conversations_tool() -> list[dict[str, Any]]:
        user = _user()

        def read() -> list[dict[str, Any]]:
            with database().read() as session:
                found = list_conversations(session, user.id)
                doing = activities(session, [c.id for c in found])
            return [
                {
                    "id": c.id,
                    "title": c.title,
                    "channel": c.channel,
                    "activity": doing.get(c.id, ""),
                }
                for c in found
            ]

        return await asyncio.to_thread(read)

    # Stateless, JSON answers: any worker can serve any request; nothing to resume.
    mcp.streamable_http_app(stateless_http=True, json_response=True, host="0.0.0.0")
    return mcp


class McpEndpoint:
    """`/mcp` in front of the app: the caller's token decides whose data the tools see."""

    def __init__(self, app: ASGIApp, server: MCPServer) -> None:
        self.app, self.server = app, server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != PATH:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").decode()
        token = given[7:].strip() if given.lower().startswith("bearer ") else ""
        database: Database = scope["app"].state.database
        user = None
        if token:
            user = await asyncio.to_thread(_lookup, database, token)
        if user is None:
            await _unauthorised(send, "missing_token" if not token else "invalid_token")
            return
        reset = _caller.set(user)
        try:
            await self.server.session_manager.handle_request(scope, receive, send)
        finally:
            _caller.reset(reset)


def _lookup(database: Database, token: str) -> UserInfo | None:
    with database.read() as session:
        return user_for_token(session, token)


async def _unauthorised(send: Send, code: str) -> None:
    body = json.dumps(
        {
            "error": {
                "code": code,
                "message": "send a nightowl access token as 'Authorization: Bearer <token>'; "
                "`nightowl token create` makes one",
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="nightowl"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
