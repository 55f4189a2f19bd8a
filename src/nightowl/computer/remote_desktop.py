"""The agents' displays when the computers are on a computer tier: a worker's and an API
process's view of the displays a computer host runs (desktop_host.py is the other end).

It meets the interface the desktop tools and the live view use of `Desktops` (`run_x`,
`states`, `state`, `take_control`, `give_back`, `vnc`). The host owns the displays, so every
worker and API process sees the same ones: a display's state is asked of the host the
computer is placed on, and a computer on no host (asleep) has no display to show.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import quote

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from nightowl.computer.capture import Captured
from nightowl.computer.desktop import CONTROL_WAIT_S, DisplayState, XRun
from nightowl.computer.protocol import Computer
from nightowl.computer.remote import RemoteComputers, RemoteSandbox, websocket_address
from nightowl.computer.sandbox import SandboxError

OPEN_TIMEOUT_S = 60.0  # the host starts x11vnc (and may wake the computer) before it opens
CONTROL_TIMEOUT_S = 120.0  # switching x11vnc retries for a while (desktop.py: _vnc_remote)


def _state(answer: dict[str, Any]) -> DisplayState:
    return DisplayState(
        agent=str(answer["agent"]),
        number=int(answer["number"]),
        running=bool(answer["running"]),
        owner_control=bool(answer["owner_control"]),
        viewers=int(answer["viewers"]),
    )


class RemoteDesktops:
    """The displays of the users' computers on their computer hosts."""

    def __init__(self, tier: RemoteComputers) -> None:
        self.tier = tier

    async def run_x(
        self,
        user_id: str,
        agent: str,
        sandbox: Computer,
        argv: Sequence[str],
        *,
        timeout_s: float = 30.0,
        as_input: bool = False,
    ) -> XRun:
        """Run an X program on the agent's display on the computer's host (the host starts
        the display, and holds input back while the owner has control). The display is the
        computer's (`sandbox.user_id`), which is `user_id` but for an isolated helper's."""
        if not isinstance(sandbox, RemoteSandbox):
            raise SandboxError("this computer is not on a computer host")
        body: dict[str, Any] = {"holder": sandbox.holder, "argv": list(argv)}
        body |= {"timeout_s": timeout_s, "as_input": as_input}
        wait = timeout_s + (CONTROL_WAIT_S if as_input else 0) + 60  # the display may start
        answer = await sandbox.post(f"displays/{quote(agent, safe='')}/x", body, wait)
        captured = None
        if answer["ran"]:
            captured = Captured(answer["exit_code"], str(answer["output"]))
        return XRun(captured, bool(answer["owner_control"]))

    async def _ask(
        self, method: str, user_id: str, route: str, timeout_s: float = 30.0
    ) -> Any | None:
        """A display request to the computer's host; None when the computer is on no host or
        the host has no such display; SandboxError when the host refuses."""
        host = await asyncio.to_thread(self.tier.placed_host, user_id)
        if host is None:
            return None
        path = f"/v1/computers/{quote(user_id, safe='')}/{route}"
        response = await self.tier.send(method, host, path, None, timeout_s)
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            said = response.json().get("error") if response.status_code == 409 else None
            raise SandboxError(said or f"the computer host answered {response.status_code}")
        return response.json()

    async def states(self, user_id: str) -> list[DisplayState]:
        """The user's displays, by agent (none while the computer is on no host)."""
        return [_state(a) for a in await self._ask("GET", user_id, "displays") or []]

    async def state(self, user_id: str, agent: str) -> DisplayState | None:
        """One display, None when the agent has none on the computer's host."""
        answer = await self._ask("GET", user_id, f"displays/{quote(agent, safe='')}")
        return None if answer is None else _state(answer)

    async def _control(self, method: str, user_id: str, agent: str) -> DisplayState:
        route = f"displays/{quote(agent, safe='')}/control"
        answer = await self._ask(method, user_id, route, CONTROL_TIMEOUT_S)
        if answer is None:
            raise LookupError(f"agent {agent!r} has no display (it has not used its desktop yet)")
        return _state(answer)

    async def take_control(self, user_id: str, agent: str) -> DisplayState:
        """The owner takes the display's input (on its host)."""
        return await self._control("POST", user_id, agent)

    async def give_back(self, user_id: str, agent: str) -> DisplayState:
        """The owner gives the display's input back to the agent (on its host)."""
        return await self._control("DELETE", user_id, agent)

    @contextlib.asynccontextmanager
    async def vnc(
        self, user_id: str, agent: str
    ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """A byte stream to the display's VNC server on the computer's host, for as long as the
        block runs (the host's websocket, bridged to a local socket pair)."""
        host = await asyncio.to_thread(self.tier.placed_host, user_id)
        if host is None:
            raise LookupError("the computer is asleep: its agent's display is not running")
        address = websocket_address(host, user_id, f"displays/{quote(agent, safe='')}/vnc")
        try:
            websocket = await connect(
                address,
                additional_headers=self.tier.headers,
                max_size=None,
                open_timeout=OPEN_TIMEOUT_S,
                compression=None,  # RFB is compressed already, and this is latency-bound
            )
        except InvalidStatus as error:
            if error.response.status_code == 404:
                raise LookupError(f"agent {agent!r} has no display on its host") from None
            raise SandboxError(f"the computer host refused the live view ({error})") from None
        except (OSError, TimeoutError, ConnectionClosed) as error:
            raise SandboxError(f"the computer host did not open ({error!r})") from None
        ours, theirs = socket.socketpair()
        async with websocket:
            reader, writer = await asyncio.open_connection(sock=ours)
            far_reader, far_writer = await asyncio.open_connection(sock=theirs)
            pumps = [
                asyncio.create_task(_to_host(far_reader, websocket)),
                asyncio.create_task(_from_host(websocket, far_writer)),
            ]
            try:
                yield reader, writer
            finally:
                for task in pumps:
                    task.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
                for end in (writer, far_writer):
                    end.close()
                    with contextlib.suppress(OSError):
                        await end.wait_closed()

    async def aclose(self) -> None:
        """Nothing to stop here: the hosts run the displays."""


async def _to_host(reader: asyncio.StreamReader, websocket: ClientConnection) -> None:
    """The viewer's bytes to the host, until the viewer's side closes."""
    with contextlib.suppress(ConnectionClosed, OSError):
        while data := await reader.read(65536):
            await websocket.send(data)
    await websocket.close()


async def _from_host(websocket: ClientConnection, writer: asyncio.StreamWriter) -> None:
    """The host's bytes to the viewer, until the host closes (the viewer then sees the end)."""
    with contextlib.suppress(ConnectionClosed, OSError):
        async for message in websocket:
            writer.write(message if isinstance(message, bytes) else message.encode())
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()
