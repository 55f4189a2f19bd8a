"""Connector routes: a user's MCP servers (add, list, change, test, remove) and which of them
a conversation may use."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import AfterValidator, BaseModel, Field, StringConstraints
from pydantic_core import PydanticCustomError

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError
from nightowl.api.inputs import (
    WELL_FORMED,
    ConnectorName,
    PathConnectorName,
    PathId,
    RequestBody,
    SafeText,
)
from nightowl.harness.tool_pins import package_change, package_label, unapproved
from nightowl.store.connectors import (
    ConnectorInfo,
    add_connector,
    allowed_connectors,
    approve_tools,
    change_connector,
    check_name,
    connectors_of,
    drop_connector,
    get_connector,
    set_allowed_connectors,
)
from nightowl.store.conversations import get_conversation
from nightowl.tools.mcp.provider import ConnectorProvider
from nightowl.tools.mcp.testing import test_connector
from nightowl.tools.providers import Toolbox

routes = APIRouter(prefix="/v1", tags=["connectors"])

Word = Annotated[str, StringConstraints(min_length=1, max_length=2000), WELL_FORMED]
Effect = Literal["read", "write", "send", "spend", ""]


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise PydanticCustomError("url_scheme", "must start with http:// or https://")
    return value


HttpUrl = Annotated[str, StringConstraints(max_length=2000), WELL_FORMED, AfterValidator(_http_url)]
HeaderName = Annotated[str, StringConstraints(min_length=1, max_length=200), WELL_FORMED]
HeaderValue = Annotated[str, StringConstraints(max_length=4000), WELL_FORMED]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=200), WELL_FORMED]


class NewConnector(RequestBody):
    """Body of `POST /v1/connectors`: a command run inside your computer (stdio), or a URL
    (streamable HTTP) with headers whose values may name secrets (`{{secret:NAME}}`)."""

    name: ConnectorName
    command: list[Word] | None = Field(default=None, min_length=1, max_length=100)
    url: HttpUrl | None = None
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict, max_length=20)
    auth: Literal["none", "oauth"] = "none"
    description: SafeText = Field(default="", max_length=300)
    trusted: bool = False


class ConnectorChange(RequestBody):
    """Body of `PATCH /v1/connectors/{name}` (fields left out stay as they are); `effects`
    sets tools' effects by their server name ('' removes an override)."""

    description: SafeText | None = Field(default=None, max_length=300)
    trusted: bool | None = None
    sampling: bool | None = None
    effects: dict[ToolName, Effect] | None = Field(default=None, max_length=500)


class ConnectorOut(BaseModel):
    """A connector as its owner sees it (header values are shown: they hold references to
    secrets, never secrets)."""

    name: str
    transport: str
    command: list[str]
    url: str | None
    headers: dict[str, str]
    auth: str
    description: str
    trusted: bool
    sampling: bool
    effects: dict[str, str]
    status: str
    error: str
    tools: list[dict[str, Any]]
    listed_at: datetime | None
    # Listed tools that differ from what the owner approved, or are new: not offered to the
    # model until approved (`GET …/diff`, `POST …/approve`).
    held: list[str]
    # A stdio server's package as pinned at its first start ("" until then), and how the one
    # its command runs now differs ("" when it does not): it does not start until approved.
    package_pin: str
    package_change: str

    @classmethod
    def of(cls, info: ConnectorInfo) -> ConnectorOut:
        """The API view of a stored connector."""
        tools = [{"name": t["name"], "description": t.get("description", "")} for t in info.tools]
        fields = {k: v for k, v in vars(info).items() if k in cls.model_fields and k != "tools"}
        held_package = info.package_held
        change = package_change(info.package, held_package) if held_package else None
        return cls(
            **fields,
            tools=tools,
            package_pin=package_label(info.package),
            package_change=change or "",
        )


class TestOut(BaseModel):
    """What `POST /v1/connectors/{name}/test` found: the tools, or what failed and what to do."""

    ok: bool
    tools: list[dict[str, Any]]
    error: str
    advice: str
    held: list[str]  # listed tools not offered until you approve them (`…/diff`)


class ToolChangeOut(BaseModel):
    """A listed tool the owner has not approved as it is: new, or changed since approved; or
    (kind `package`) a stdio server's package that differs from its pin."""

    name: str  # its name on the server (the package's, for a package)
    kind: Literal["new", "changed", "package"]
    diff: str  # unified diff of name, description, input schema and annotations; or what
    # differs of the package (version, files changed, added, removed)


class ApproveTools(RequestBody):
    """Which held tools to approve as they are listed now (their names on the server); null
    approves every held tool."""

    tools: list[Word] | None = Field(default=None, max_length=500)


class AllowedConnectors(RequestBody):
    """Which connectors a conversation may use: names, or null for all of yours."""

    connectors: list[ConnectorName] | None = Field(max_length=100)


def _provider(request: Request) -> ConnectorProvider:
    provider: ConnectorProvider = request.app.state.connectors
    return provider


def _reserved(request: Request) -> list[str]:
    toolbox: Toolbox = request.app.state.toolbox
    return sorted({name.split("_")[0] for name in toolbox.builtin.names()})


@routes.get("/connectors")
def my_connectors(user: CurrentUser, request: Request) -> list[ConnectorOut]:
    """Your connectors, by name."""
    with database_of(request).read() as session:
        return [ConnectorOut.of(c) for c in connectors_of(session, user.id)]


@routes.post("/connectors", status_code=201)
def new_connector(body: NewConnector, user: CurrentUser, request: Request) -> ConnectorOut:
    """Add a connector; it connects when first used (`test` connects now)."""
    check_name(body.name, _reserved(request))
    with database_of(request).write() as session:
        info = add_connector(
            session,
            user.id,
            body.name,
            command=body.command or (),
            url=body.url,
            headers=body.headers,
            auth=body.auth,
            description=body.description,
            trusted=body.trusted,
        )
    return ConnectorOut.of(info)


@routes.get("/connectors/{name}")
def one_connector(name: PathConnectorName, user: CurrentUser, request: Request) -> ConnectorOut:
    """One of your connectors."""
    with database_of(request).read() as session:
        return ConnectorOut.of(get_connector(session, user.id, name))


@routes.patch("/connectors/{name}")
async def edit_connector(
    name: PathConnectorName, body: ConnectorChange, user: CurrentUser, request: Request
) -> ConnectorOut:
    """Change a connector's description, trust, sampling or tools' effects."""

    def change() -> ConnectorInfo:
        with database_of(request).write() as session:
            return change_connector(
                session,
                user.id,
                name,
                description=body.description,
                trusted=body.trusted,
                sampling=body.sampling,
                effects=dict(body.effects) if body.effects is not None else None,
            )

    # An open session stays (a call in flight must not fail): none of these settings changes how
    # the server is reached, and each call gives the session the connector as stored now.
    return ConnectorOut.of(await asyncio.to_thread(change))


@routes.delete("/connectors/{name}", status_code=204)
async def remove_connector(
    name: PathConnectorName, user: CurrentUser, request: Request
) -> Response:
    """Remove a connector (its session is closed)."""

    def drop() -> None:
        with database_of(request).write() as session:
            drop_connector(session, user.id, name)

    await asyncio.to_thread(drop)
    await _provider(request).connections.close_connector(user.id, name)
    return Response(status_code=204)


@routes.post("/connectors/{name}/test")
async def check_connector(name: PathConnectorName, user: CurrentUser, request: Request) -> TestOut:
    """Connect now, list the tools; or say what failed and what to do."""

    def load() -> ConnectorInfo:
        with database_of(request).read() as session:
            return get_connector(session, user.id, name)

    connector = await asyncio.to_thread(load)
    report = await test_connector(_provider(request), request.app.state.computers, connector)
    return TestOut(**vars(report))


@routes.get("/connectors/{name}/diff")
def connector_diff(
    name: PathConnectorName, user: CurrentUser, request: Request
) -> list[ToolChangeOut]:
    """What the connector lists now that you have not approved: each held tool with the diff
    from what you approved (what the server says is outside text: read it before approving)."""
    with database_of(request).read() as session:
        info = get_connector(session, user.id, name)
    changes = [
        ToolChangeOut(name=c.name, kind=c.kind, diff=c.diff())
        for c in unapproved(info.tools, info.pinned)
    ]
    if info.package_held is not None:
        changed = package_change(info.package, info.package_held) or "its files differ"
        label = package_label(info.package_held)
        named = str(info.package_held.get("name") or "package")
        changes.append(ToolChangeOut(name=named, kind="package", diff=f"{changed}\nnow: {label}"))
    return changes


@routes.post("/connectors/{name}/approve")
async def approve_connector_tools(
    name: PathConnectorName, body: ApproveTools, user: CurrentUser, request: Request
) -> ConnectorOut:
    """Approve held tools as they are listed now: the agent is offered them from its next
    step on."""

    def approve() -> ConnectorInfo:
        with database_of(request).write() as session:
            return approve_tools(session, user.id, name, body.tools)

    approved = await asyncio.to_thread(approve)
    _provider(request).note_change()  # running turns read the listing again
    return ConnectorOut.of(approved)


@routes.get("/conversations/{conversation_id}/connectors")
def conversation_connectors_out(
    conversation_id: PathId, user: CurrentUser, request: Request
) -> AllowedConnectors:
    """Which of your connectors the conversation may use (null: all)."""
    with database_of(request).read() as session:
        get_conversation(session, conversation_id, user.id)
        return AllowedConnectors(connectors=allowed_connectors(session, conversation_id))


@routes.put("/conversations/{conversation_id}/connectors")
def limit_connectors(
    conversation_id: PathId, body: AllowedConnectors, user: CurrentUser, request: Request
) -> AllowedConnectors:
    """Limit the conversation to some of your connectors (null: all of them)."""
    with database_of(request).write() as session:
        get_conversation(session, conversation_id, user.id)
        if body.connectors is not None:
            known = {c.name for c in connectors_of(session, user.id)}
            unknown = sorted(set(body.connectors) - known)
            if unknown:
                raise ApiError(404, "not_found", f"no connector named {unknown[0]!r}")
        set_allowed_connectors(session, conversation_id, body.connectors)
        return AllowedConnectors(connectors=allowed_connectors(session, conversation_id))
