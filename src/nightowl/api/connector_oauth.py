"""OAuth for connectors reached by URL: the owner starts an authorisation (the answer is the
URL to open), the service sends the browser back to the callback here, and the flow finishes
(tools/mcp/oauth.py). The callback carries no nightowl token: the flow's unguessable `state`
is what ties it to the owner who started it."""

from __future__ import annotations

import html

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError
from nightowl.api.inputs import PathConnectorName
from nightowl.store.connectors import ConnectorInfo, get_connector
from nightowl.tools.mcp.connections import CallScope, ConnectorError
from nightowl.tools.mcp.oauth import CALLBACK_PATH, OAuthFlows
from nightowl.tools.mcp.provider import ConnectorProvider

routes = APIRouter(tags=["connectors"])


class AuthorizationOut(BaseModel):
    """Where the owner authorises nightowl (`authorize_url`), or that it already is (null)."""

    authorize_url: str | None
    status: str


def _parts(request: Request) -> tuple[ConnectorProvider, OAuthFlows]:
    return request.app.state.connectors, request.app.state.connector_oauth


@routes.post("/v1/connectors/{name}/authorize")
async def authorize_connector(
    name: PathConnectorName, user: CurrentUser, request: Request
) -> AuthorizationOut:
    """Start the owner's OAuth authorisation of a connector: open `authorize_url`."""
    with database_of(request).read() as session:
        connector = get_connector(session, user.id, name)
    if connector.auth != "oauth":
        raise ApiError(409, "not_oauth", f"{name} does not use OAuth (add it with --oauth)")
    provider, flows = _parts(request)

    async def connect(found: ConnectorInfo) -> None:
        # A session opened now uses this flow's auth, so the one before must go.
        await provider.connections.close_connector(found.owner_id, found.name)
        try:
            await provider.list_now(found, None, CallScope(found.owner_id))
        finally:  # later sessions use an auth that never waits for a browser
            await provider.connections.close_connector(found.owner_id, found.name)

    redirect = str(request.base_url).rstrip("/") + CALLBACK_PATH
    await provider.connections.close_connector(user.id, name)
    try:
        url = await flows.start(connector, redirect, connect)
    except ConnectorError as error:
        raise ApiError(502, "connector_failed", str(error)) from error
    return AuthorizationOut(authorize_url=url, status="authorize" if url else "ok")


@routes.get(CALLBACK_PATH, response_class=HTMLResponse, include_in_schema=False)
async def oauth_callback(
    request: Request, state: str = "", code: str = "", error: str = "", iss: str | None = None
) -> HTMLResponse:
    """Where the service sends the owner's browser back after the authorisation."""
    _, flows = _parts(request)
    if error or not code:
        return _page(f"The service did not authorise nightowl ({error or 'no code'}).", 400)
    try:
        connector = await flows.finish(state, code, iss)
    except (ConnectorError, TimeoutError) as failed:
        return _page(f"The authorisation did not complete: {failed}", 400)
    return _page(
        f"nightowl may now use {connector.name} ({len(connector.tools)} tools). "
        "You can close this tab.",
        200,
    )


def _page(text: str, status: int) -> HTMLResponse:
    body = (
        "<!doctype html><meta charset=utf-8><title>nightowl</title>"
        f"<p id=result>{html.escape(text)}</p>"
    )
    return HTMLResponse(body, status_code=status)
