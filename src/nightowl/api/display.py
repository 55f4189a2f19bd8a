"""The owner's live view of an agent's desktop: state, taking and giving back control, the VNC
stream over a websocket, and the page (noVNC) that shows it.

Browsers cannot set headers on a websocket, and a token in its URL would land in access logs,
so the websocket's first message is the owner's access token; after that, binary messages
carry the RFB stream both ways. On a computer tier the displays are the computer host's: the
same routes ask it (computer/remote_desktop.py), and the stream is bridged to its websocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from pathlib import Path

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, HTMLResponse
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import PathId
from nightowl.api.pages import page_response
from nightowl.api.revocation import token_watch_of
from nightowl.api.webapp import SECURITY_HEADERS
from nightowl.computer.desktop import HEIGHT, WIDTH, DesktopError, Desktops, DisplayState
from nightowl.computer.remote_desktop import RemoteDesktops
from nightowl.computer.sandbox import SandboxError
from nightowl.computer.websocket_relay import relay
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.users import UserInfo, user_for_token

log = logging.getLogger(__name__)

AUTH_TIMEOUT_S = 10.0
NOVNC_DIR = Path("/usr/share/novnc")  # Debian package novnc
_NOVNC_FILE = re.compile(r"^(core|vendor)(/[A-Za-z0-9_.-]+)+\.js$")
# The page's policy: the app's, plus data: images (noVNC draws the remote cursor as one).
PAGE_HEADERS = {
    **SECURITY_HEADERS,
    "Content-Security-Policy": SECURITY_HEADERS["Content-Security-Policy"].replace(
        "img-src 'self' blob:", "img-src 'self' blob: data:"
    ),
}
# Close codes a viewer can act on (4000-4999 are the application's own).
CLOSE_UNAUTHORIZED, CLOSE_NO_DISPLAY, CLOSE_UNAVAILABLE = 4401, 4404, 4503

routes = APIRouter(tags=["displays"])


class DisplayOut(BaseModel):
    """An agent's virtual display as its owner sees it."""

    agent: str
    display: str
    width: int
    height: int
    running: bool
    owner_control: bool
    viewers: int

    @classmethod
    def of(cls, state: DisplayState) -> DisplayOut:
        """The API form of a display."""
        return cls(
            agent=state.agent,
            display=f":{state.number}",
            width=WIDTH,
            height=HEIGHT,
            running=state.running,
            owner_control=state.owner_control,
            viewers=state.viewers,
        )


def desktops_of(request: Request | WebSocket) -> Desktops | RemoteDesktops:
    """The server's displays (or, on a computer tier, its hosts')."""
    desktops: Desktops | RemoteDesktops = request.app.state.desktops
    return desktops


def _unavailable(error: Exception) -> ApiError:
    return ApiError(503, "display_unavailable", f"{error}; try again")


async def _mine(request: Request, user: UserInfo, agent: str) -> DisplayState:
    try:
        state = await desktops_of(request).state(user.id, agent)
    except SandboxError as error:
        raise _unavailable(error) from error
    if state is None:
        raise NotFound(f"agent {agent!r} has no display of yours; it starts with its desktop tools")
    return state


@routes.get("/v1/displays", responses=error_responses(503))
async def my_displays(user: CurrentUser, request: Request) -> list[DisplayOut]:
    """The caller's agents' displays."""
    try:
        return [DisplayOut.of(s) for s in await desktops_of(request).states(user.id)]
    except SandboxError as error:
        raise _unavailable(error) from error


@routes.get("/v1/displays/{agent}", responses=error_responses(503))
async def one_display(agent: PathId, user: CurrentUser, request: Request) -> DisplayOut:
    """One agent's display (the agent is the conversation that uses it)."""
    return DisplayOut.of(await _mine(request, user, agent))


@routes.post("/v1/displays/{agent}/control", responses=error_responses(503))
async def take_control(agent: PathId, user: CurrentUser, request: Request) -> DisplayOut:
    """Take the display's keyboard and mouse; the agent's input waits until control is given back
    (or it lapses after a while)."""
    await _mine(request, user, agent)
    try:
        return DisplayOut.of(await desktops_of(request).take_control(user.id, agent))
    except (SandboxError, DesktopError) as error:
        raise _unavailable(error) from error


@routes.delete("/v1/displays/{agent}/control", responses=error_responses(503))
async def give_back_control(agent: PathId, user: CurrentUser, request: Request) -> DisplayOut:
    """Give the display back to the agent; viewers only watch again."""
    await _mine(request, user, agent)
    try:
        return DisplayOut.of(await desktops_of(request).give_back(user.id, agent))
    except SandboxError as error:
        raise _unavailable(error) from error


def _user_for(database: Database, token: str) -> UserInfo | None:
    with database.read() as session:
        return user_for_token(session, token)


async def _authenticate(websocket: WebSocket) -> tuple[UserInfo, str] | None:
    """The user whose token is the first message (and the token), or None (the socket is then
    closed)."""
    try:
        first = await asyncio.wait_for(websocket.receive(), AUTH_TIMEOUT_S)
    except TimeoutError:
        first = {"type": "websocket.receive"}
    if first["type"] == "websocket.disconnect":
        return None
    token = (first.get("text") or (first.get("bytes") or b"").decode(errors="replace")).strip()
    user = None
    if token:
        user = await asyncio.to_thread(_user_for, websocket.app.state.database, token)
    if user is None:
        reason = "send a valid access token as the first message"
        await websocket.close(CLOSE_UNAUTHORIZED, reason)
        return None
    return user, token


@routes.websocket("/v1/displays/{agent}/vnc")
async def vnc_stream(websocket: WebSocket, agent: str) -> None:
    """The display's VNC (RFB) stream; the first message must be the owner's access token."""
    # A viewer may go away at any point, even while we close on it: that is no error.
    with contextlib.suppress(WebSocketDisconnect):
        await _live_view(websocket, agent)


async def _live_view(websocket: WebSocket, agent: str) -> None:
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol="binary" if "binary" in offered else None)
    signed_in = await _authenticate(websocket)
    if signed_in is None:
        return
    user, token = signed_in
    desktops = desktops_of(websocket)
    try:
        if await desktops.state(user.id, agent) is None:
            await websocket.close(CLOSE_NO_DISPLAY, "this agent has no display of yours")
            return
        with token_watch_of(websocket.app).watching(token) as revoked:
            async with desktops.vnc(user.id, agent) as (reader, writer):
                ended_by = await relay(websocket, reader, writer, revoked)
    except (SandboxError, DesktopError, LookupError) as error:
        log.warning("live view failed", extra={"agent": agent, "error": str(error)})
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAVAILABLE, "the display is not available; try again")
        return
    if ended_by == "stopped":  # the token was revoked
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAUTHORIZED, "the access token was revoked")
    elif ended_by == "server":
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAVAILABLE, "the display's VNC server closed")


@routes.get("/display", include_in_schema=False)
def display_page() -> HTMLResponse:
    """The live view page (`/display#agent=<conversation id>`; the token comes from the app)."""
    return page_response("display", PAGE_HEADERS)


@routes.get("/novnc/{path:path}", include_in_schema=False)
def novnc_file(path: str) -> FileResponse:
    """A module of the noVNC client, from the system's novnc package."""
    file = NOVNC_DIR / path
    if ".." in path or not _NOVNC_FILE.match(path) or not file.is_file():
        raise NotFound(f"no noVNC file {path!r} (is the novnc package installed?)")
    return FileResponse(file, media_type="text/javascript", headers=SECURITY_HEADERS)
