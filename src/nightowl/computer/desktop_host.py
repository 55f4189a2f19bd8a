"""The agents' displays served by a computer host: the host runs each display (Xvfb, x11vnc)
in the user's sandbox with its own `Desktops`, and workers and API processes reach it here
(remote_desktop.py is the other end).

Routes, all under `/v1/computers/<user>/displays` and all for workers only (the tier's token):
`POST <agent>/x` runs an X program on the agent's display within a turn (its holder), input
first waiting for the owner's control; `GET` lists the displays and `GET <agent>` gives one;
`POST`/`DELETE <agent>/control` takes and gives back the owner's control; the websocket
`<agent>/vnc` carries the display's VNC (RFB) stream, the API server bridging the owner's live
view to it (the owner's own token is checked there; here, the tier's, before anything starts).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, HTTPException, Request, WebSocket
from fastapi.params import Depends
from pydantic import BaseModel, Field
from starlette.websockets import WebSocketDisconnect

from nightowl.computer.browser_host import deny
from nightowl.computer.desktop import DesktopError, Desktops, DisplayState
from nightowl.computer.sandbox import Sandbox, SandboxError
from nightowl.computer.websocket_relay import relay

log = logging.getLogger(__name__)
MAX_X_TIMEOUT_S = 600.0
# Close codes the API server passes on to the viewer's close (4000-4999: the application's).
CLOSE_UNAVAILABLE = 4503


class XProgram(BaseModel):
    """An X program to run on an agent's display, within a turn (`holder`)."""

    holder: str = Field(min_length=1, max_length=200)
    argv: list[str] = Field(min_length=1)
    timeout_s: float = Field(default=30.0, gt=0, le=MAX_X_TIMEOUT_S)
    as_input: bool = False


def _answer(state: DisplayState) -> dict[str, Any]:
    return dataclasses.asdict(state)


def add_display_routes(
    app: FastAPI,
    desktops: Desktops,
    held: Callable[[str, str], Awaitable[Sandbox]],
    from_worker: Callable[[str], bool],
    guarded: list[Depends],
) -> None:
    """Serve `desktops` on the host's `app` (`held`: the sandbox a holder holds;
    `from_worker`: whether an Authorization header carries the tier's token)."""

    @app.post("/v1/computers/{user_id}/displays/{agent}/x", dependencies=guarded)
    async def run_x(user_id: str, agent: str, body: XProgram, request: Request) -> dict[str, Any]:
        sandbox = await held(user_id, body.holder)
        running = asyncio.create_task(
            desktops.run_x(
                user_id,
                agent,
                sandbox,
                body.argv,
                timeout_s=body.timeout_s,
                as_input=body.as_input,
            )
        )
        # A worker that gives up (its turn was preempted) takes its input back: held for the
        # owner's control, it must not be typed once control is given back.
        while not running.done():
            await asyncio.wait({running}, timeout=0.5)
            if not running.done() and await request.is_disconnected():
                running.cancel()
        try:
            ran = await running
        except DesktopError as error:
            raise SandboxError(str(error)) from None  # a 409 with the reason
        captured = ran.captured
        return {
            "ran": captured is not None,
            "exit_code": None if captured is None else captured.exit_code,
            "output": "" if captured is None else captured.output,
            "owner_control": ran.owner_control,
        }

    @app.get("/v1/computers/{user_id}/displays", dependencies=guarded)
    async def displays(user_id: str) -> list[dict[str, Any]]:
        return [_answer(s) for s in await desktops.states(user_id)]

    @app.get("/v1/computers/{user_id}/displays/{agent}", dependencies=guarded)
    async def display(user_id: str, agent: str) -> dict[str, Any]:
        state = await desktops.state(user_id, agent)
        if state is None:
            raise HTTPException(404, f"agent {agent!r} has no display here")
        return _answer(state)

    @app.post("/v1/computers/{user_id}/displays/{agent}/control", dependencies=guarded)
    async def take_control(user_id: str, agent: str) -> dict[str, Any]:
        try:
            return _answer(await desktops.take_control(user_id, agent))
        except LookupError as error:
            raise HTTPException(404, str(error)) from None
        except DesktopError as error:
            raise SandboxError(str(error)) from None

    @app.delete("/v1/computers/{user_id}/displays/{agent}/control", dependencies=guarded)
    async def give_back(user_id: str, agent: str) -> dict[str, Any]:
        try:
            return _answer(await desktops.give_back(user_id, agent))
        except LookupError as error:
            raise HTTPException(404, str(error)) from None

    @app.websocket("/v1/computers/{user_id}/displays/{agent}/vnc")
    async def vnc(websocket: WebSocket, user_id: str, agent: str) -> None:
        """The display's VNC stream (binary messages both ways) for the API server's live
        view; refused without the tier's token, and with 404 when there is no display."""
        if not from_worker(websocket.headers.get("authorization", "")):
            await deny(websocket, 401, {"detail": "a computer host answers only workers"})
            return
        if desktops.find(user_id, agent) is None:
            await deny(websocket, 404, {"error": f"agent {agent!r} has no display here"})
            return
        await websocket.accept()
        with contextlib.suppress(WebSocketDisconnect):
            await _serve_vnc(websocket, desktops, user_id, agent)


async def _serve_vnc(websocket: WebSocket, desktops: Desktops, user_id: str, agent: str) -> None:
    try:
        async with desktops.vnc(user_id, agent) as (reader, writer):
            await relay(websocket, reader, writer)
    except (SandboxError, DesktopError, LookupError) as error:
        log.warning("live view failed on the host", extra={"agent": agent, "error": str(error)})
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close(CLOSE_UNAVAILABLE, "the display is not available")
        return
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await websocket.close()
