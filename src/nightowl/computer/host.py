"""A computer host: the users' sandboxes of this machine, served to the workers over HTTP.

`nightowl computer-host` runs this app. Every request but /healthz carries the tier's token
(`Authorization: Bearer …`, compared in constant time): only workers reach a sandbox. The
routes are the sandbox interface the tools use (acquire, run, call, start a daemon, release,
sleep, destroy), two websockets: the user's browser, carrying Chromium's DevTools protocol
(browser_host.py), and a command's stdio (an MCP server in the computer, stdio_host.py); and
the agents' displays, which the host runs, with their live view's VNC stream (desktop_host.py).
A SandboxError becomes a 409 whose body says why, and the client raises it again. Each
computer a host runs is placed on it in the database under a lease the host renews; see
computers.py for how a computer moves between hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, WebSocket
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from nightowl.computer.browser_host import HostedBrowsers, deny
from nightowl.computer.computers import (
    COMPUTER_ID,
    Computers,
    PlacedElsewhere,
    sleep_idle_forever,
)
from nightowl.computer.desktop import Desktops
from nightowl.computer.desktop_host import add_display_routes
from nightowl.computer.sandbox import Sandbox, SandboxError
from nightowl.computer.stdio_host import serve_stdio
from nightowl.store.computers import renew_placements

log = logging.getLogger(__name__)
REFUSED = "a computer host answers only workers with its token"


class Acquire(BaseModel):
    """Hold the user's computer awake for `holder` (a turn) until it is released."""

    holder: str = Field(min_length=1, max_length=200)


class Run(BaseModel):
    """A command to run in the computer, held by `holder`."""

    holder: str = Field(min_length=1, max_length=200)
    command: str | None = None
    argv: list[str] | None = None
    output: str | None = None
    timeout_s: float | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class Call(BaseModel):
    """One supervisor request with one answer (file operations, kill)."""

    holder: str = Field(min_length=1, max_length=200)
    request: dict[str, Any]
    timeout_s: float = 60.0


class Daemon(BaseModel):
    """A long-running process to start in the computer."""

    holder: str = Field(min_length=1, max_length=200)
    argv: list[str]
    output: str | None = None
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


def build_host_app(computers: Computers, token: str, renew_every_s: float) -> FastAPI:
    """The computer host's HTTP app over `computers` (a Computers with a host_name set)."""
    host = computers.settings.host_name
    assert host is not None, "a computer host places computers under its own name"
    expected = f"Bearer {token}".encode()
    browsers = HostedBrowsers(computers)
    computers.before_sleep.append(browsers.close_user)  # the profile is flushed first
    desktops = Desktops(computers)

    def from_worker(authorization: str) -> bool:
        given = authorization.encode()
        return bool(token) and hmac.compare_digest(given, expected)  # safety: workers only

    def worker_only(request: Request) -> None:
        if not from_worker(request.headers.get("authorization", "")):
            raise HTTPException(401, REFUSED)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        idle_s = computers.settings.idle_sleep_s
        background = [
            asyncio.create_task(_renew_forever(computers, host, renew_every_s)),
            asyncio.create_task(sleep_idle_forever(computers, min(60.0, idle_s / 4))),
        ]
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await browsers.close()
            await desktops.aclose()
            await asyncio.to_thread(computers.close)

    app = FastAPI(title="nightowl computer host", lifespan=lifespan)

    def plain_computer_id(request: Request) -> None:
        # A computer id names a folder under the homes: never `..` or a path.
        user_id = request.path_params.get("user_id")
        if user_id is not None and not COMPUTER_ID.fullmatch(user_id):
            raise HTTPException(422, "not a computer id (letters, digits, '_' and '-' only)")

    guarded = [Depends(worker_only), Depends(plain_computer_id)]

    @app.exception_handler(SandboxError)
    async def _refused(_request: Request, error: SandboxError) -> JSONResponse:
        body: dict[str, Any] = {"error": str(error)}
        if isinstance(error, PlacedElsewhere):
            body["placed_on"] = error.host
        return JSONResponse(body, status_code=409)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"host": host}

    @app.post("/v1/computers/{user_id}/acquire", dependencies=guarded)
    async def acquire(user_id: str, body: Acquire) -> dict[str, Any]:
        await computers.acquire(user_id, body.holder)
        return {"host": host, "notice": computers.take_notice(body.holder)}

    async def held(user_id: str, holder: str) -> Sandbox:
        """The sandbox `holder` holds (a tool call within a turn), else acquired for it."""
        sandbox = computers.held(user_id, holder)
        return sandbox if sandbox is not None else await computers.acquire(user_id, holder)

    @app.post("/v1/computers/{user_id}/run", dependencies=guarded)
    async def run(user_id: str, body: Run, request: Request) -> dict[str, Any]:
        sandbox = await held(user_id, body.holder)
        command = body.command if body.command is not None else body.argv or []
        running = asyncio.create_task(
            sandbox.run(
                command, output=body.output, timeout_s=body.timeout_s, cwd=body.cwd, env=body.env
            )
        )
        # A worker that gives up (its turn was preempted or it died) kills the command.
        while not running.done():
            await asyncio.wait({running}, timeout=0.5)
            if not running.done() and await request.is_disconnected():
                running.cancel()
        result = await running
        return {"exit_code": result.exit_code, "timed_out": result.timed_out}

    @app.post("/v1/computers/{user_id}/call", dependencies=guarded)
    async def call(user_id: str, body: Call) -> dict[str, Any]:
        sandbox = await held(user_id, body.holder)
        return await sandbox.call(body.request, timeout_s=body.timeout_s)

    @app.post("/v1/computers/{user_id}/daemon", dependencies=guarded)
    async def daemon(user_id: str, body: Daemon) -> dict[str, int]:
        sandbox = await computers.acquire(user_id, body.holder)
        pid = await sandbox.start_daemon(body.argv, output=body.output, env=body.env, cwd=body.cwd)
        return {"pid": pid}

    async def opened(websocket: WebSocket, user_id: str) -> Sandbox | None:
        """The sandbox a websocket from a worker (the token) holds (`?holder=`, the turn);
        None when it was refused."""
        if not from_worker(websocket.headers.get("authorization", "")):
            await deny(websocket, 401, {"detail": REFUSED})
            return None
        holder = websocket.query_params.get("holder", "")
        if not 1 <= len(holder) <= 200:
            await deny(websocket, 422, {"error": "give the holder (the turn) as ?holder=…"})
            return None
        try:
            return await held(user_id, holder)
        except SandboxError as error:
            await deny(websocket, 409, {"error": str(error)})
            return None

    @app.websocket("/v1/computers/{user_id}/browser")
    async def browser(websocket: WebSocket, user_id: str) -> None:
        """The user's Chromium, its DevTools protocol over this websocket (Playwright's
        connect_over_cdp); the holder keeps the computer awake while it starts."""
        sandbox = await opened(websocket, user_id)
        if sandbox is not None:
            await browsers.serve(user_id, sandbox, websocket)

    @app.websocket("/v1/computers/{user_id}/stdio")
    async def stdio(websocket: WebSocket, user_id: str) -> None:
        """A command inside the computer (an MCP server), its stdio over this websocket."""
        sandbox = await opened(websocket, user_id)
        if sandbox is not None:
            await websocket.accept()
            await serve_stdio(sandbox, websocket)

    add_display_routes(app, desktops, held, from_worker, guarded)

    @app.post("/v1/holders/{holder}/release", dependencies=guarded)
    async def release(holder: str) -> dict[str, bool]:
        await computers.release(holder)
        return {"released": True}

    @app.post("/v1/computers/{user_id}/sleep", dependencies=guarded)
    async def sleep(user_id: str) -> dict[str, bool]:
        return {"slept": await computers.deep_sleep(user_id)}

    @app.post("/v1/computers/{user_id}/destroy", dependencies=guarded)
    async def destroy(user_id: str) -> dict[str, bool]:
        await computers.destroy(user_id)
        return {"destroyed": True}

    @app.post("/v1/computers/{user_id}/remove", dependencies=guarded)
    async def remove(user_id: str) -> dict[str, bool]:
        await computers.remove(user_id)
        return {"removed": True}

    @app.get("/v1/computers/{user_id}/state", dependencies=guarded)
    async def state(user_id: str) -> dict[str, str]:
        return {"state": computers.state(user_id)}

    return app


async def _renew_forever(computers: Computers, host: str, every_s: float) -> None:
    """The host's heartbeat: its computers stay placed on it while it lives."""

    def renew() -> None:
        with computers.database.write() as session:
            renew_placements(session, host, computers.settings.lease_s)

    while True:
        try:
            await asyncio.to_thread(renew)  # off the loop: a slow database stalls no request
        except Exception:
            log.exception("renewing this host's computer leases failed")
        await asyncio.sleep(every_s)
