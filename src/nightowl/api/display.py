"""The owner's live view of an agent's desktop: state, taking and giving back control, the VNC
stream over a websocket, and the page (noVNC) that shows it.

Browsers cannot set headers on a websocket, and a token in its URL would land in access logs,
so the websocket's first message is the owner's access token; after that, binary messages
carry the RFB stream both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from pathlib import Path

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse
from pydantic import BaseModel

from nightowl.api.auth import CurrentUser
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import PathId
from nightowl.api.revocation import token_watch_of
from nightowl.api.webapp import SECURITY_HEADERS, WEB_DIR
from nightowl.computer.desktop import HEIGHT, WIDTH, DesktopError, Desktops, Display
from nightowl.computer.sandbox import SandboxError
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
    def of(cls, display: Display) -> DisplayOut:
        """The API form of a display."""
        running = display.sandbox is not None and display.sandbox.alive()
        return cls(
            agent=display.agent,
            display=f":{display.number}",
            width=WIDTH,
            height=HEIGHT,
            running=running,
            owner_control=display.owner_control,
            viewers=display.viewers,
        )


def desktops_of(request: Request | WebSocket) -> Desktops:
    """The server's displays."""
    desktops: Desktops = request.app.state.desktops
    return desktops


def _mine(request: Request, user: UserInfo, agent: str) -> Display:
    display = desktops_of(request).find(user.id, agent)
    if display is None:
        raise NotFound(f"agent {agent!r} has no display of yours; it starts with its desktop tools")
    return display


@routes.get("/v1/displays")
async def my_displays(user: CurrentUser, request: Request) -> list[DisplayOut]:
    """The caller's agents' displays."""
    return [DisplayOut.of(d) for d in desktops_of(request).displays_of(user.id)]


@routes.get("/v1/displays/{agent}")
async def one_display(agent: PathId, user: CurrentUser, request: Request) -> DisplayOut:
    """One agent's display (the agent is the conversation that uses it)."""
    return DisplayOut.of(_mine(request, user, agent))


@routes.post("/v1/displays/{agent}/control", responses=error_responses(503))
async def take_control(agent: PathId, user: CurrentUser, request: Request) -> DisplayOut:
    """Take the display's keyboard and mouse; the agent's input waits until control is given back
    (or it lapses after a while)."""
    _mine(request, user, agent)
    try:
        return DisplayOut.of(await desktops_of(request).take_control(user.id, agent))
    except (SandboxError, DesktopError) as error:
        raise ApiError(503, "display_unavailable", f"{error}; try again") from error


@routes.delete("/v1/displays/{agent}/control")
async def give_back_control(agent: PathId, user: CurrentUser, request: Request) -> DisplayOut:
    """Give the display back to the agent; viewers only watch again."""
    _mine(request, user, agent)
    return DisplayOut.of(await desktops_of(request).give_back(user.id, agent))


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
    if desktops.find(user.id, agent) is None:
        await websocket.close(CLOSE_NO_DISPLAY, "this agent has no display of yours")
        return
    try:
        with token_watch_of(websocket.app).watching(token) as revoked:
            async with desktops.vnc(user.id, agent) as (reader, writer):
                ended_by = await _relay(websocket, reader, writer, revoked)
    except (SandboxError, DesktopError, LookupError) as error:
        log.warning("live view failed", extra={"agent": agent, "error": str(error)})
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAVAILABLE, "the display is not available; try again")
        return
    if ended_by == "revoked":
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAUTHORIZED, "the access token was revoked")
    elif ended_by == "server":
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAVAILABLE, "the display's VNC server closed")


async def _relay(
    websocket: WebSocket,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    revoked: asyncio.Event,
) -> str:
    """Copy bytes both ways until one side ends or the token is revoked: which ended it
    ("viewer", "server" or "revoked")."""

    async def from_viewer() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes") or (message.get("text") or "").encode()
            writer.write(data)
            await writer.drain()

    async def to_viewer() -> None:
        while data := await reader.read(65536):
            await websocket.send_bytes(data)

    viewer = asyncio.create_task(from_viewer())
    server = asyncio.create_task(to_viewer())
    revocation = asyncio.create_task(revoked.wait())
    done, pending = await asyncio.wait(
        {viewer, server, revocation}, return_when=asyncio.FIRST_COMPLETED
    )
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, OSError):
            await task
    for task in done:
        error = task.exception()
        if error is not None and not isinstance(
            error, WebSocketDisconnect | OSError | RuntimeError
        ):
            raise error
    if revocation in done:
        return "revoked"
    return "server" if server in done and viewer not in done else "viewer"


@routes.get("/display", include_in_schema=False)
def display_page() -> FileResponse:
    """The live view page (`/display#agent=<conversation id>`; the token comes from the app)."""
    return FileResponse(WEB_DIR / "display.html", media_type="text/html", headers=PAGE_HEADERS)


@routes.get("/novnc/{path:path}", include_in_schema=False)
def novnc_file(path: str) -> FileResponse:
    """A module of the noVNC client, from the system's novnc package."""
    file = NOVNC_DIR / path
    if ".." in path or not _NOVNC_FILE.match(path) or not file.is_file():
        raise NotFound(f"no noVNC file {path!r} (is the novnc package installed?)")
    return FileResponse(file, media_type="text/javascript", headers=SECURITY_HEADERS)
