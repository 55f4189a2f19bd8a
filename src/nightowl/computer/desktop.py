"""Virtual desktops: one X display per agent inside its owner's sandbox, and the owner's live view.

Each agent (a conversation) gets its own Xvfb display inside the user's sandbox; the desktop
tools drive it with xdotool and read it with ImageMagick's `import`. For the live view an
x11vnc server runs on the display, listening on the sandbox's own loopback, view-only until
the owner takes control; a viewer's bytes reach it through a small relay started inside the
sandbox (`vnc`, vnc_relay.py). While the owner holds control, the agent's input waits
(`wait_for_agent`). On a computer tier each computer host runs its own `Desktops` over the
computers it holds (desktop_host.py), and workers and API processes reach it
(remote_desktop.py).

Turns and the API run on different event loops, so nothing here is bound to a loop: starting
a display or switching its live view runs under the display's thread lock, in a worker thread
with a loop of its own, and waiting for the owner polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nightowl.computer.capture import Captured, capture, tail
from nightowl.computer.computers import Computers
from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import HOME_INSIDE, SandboxError
from nightowl.computer.vnc_relay import relay_argv

log = logging.getLogger(__name__)
T = TypeVar("T")

WIDTH, HEIGHT, DEPTH = 1280, 800, 24
FIRST_DISPLAY = 10  # :0-:9 stay free for anything the agent starts by hand
VNC_BASE_PORT = 5900
MAX_DISPLAYS_PER_USER = 4
SCREENS_INSIDE = f"{HOME_INSIDE}/.nightowl/screens"
KEEP_SCREENSHOTS = 100
CONTROL_WAIT_S = 120.0  # how long an agent's input waits for the owner to give control back
CONTROL_HOLD_S = 900.0  # the owner's control lapses after this (taking it again renews it)
READY_TIMEOUT_S = 15.0
POLL_S = 0.2  # how often waiting input looks whether the owner gave control back
DISPLAY_GONE = 111  # exit code of a command whose display is no longer running
# x11vnc: on the sandbox's loopback only, many viewers, no password (the server's websocket
# checks the owner's token), no helper programs, no rc file, no DNS lookups.
VNC_FLAGS = ["-localhost", "-shared", "-forever", "-nopw", "-nocmds", "-norc", "-nolookup"]


class DesktopError(RuntimeError):
    """A display could not start or answer (the message says why and what to do)."""


@dataclass(frozen=True)
class DisplayState:
    """What the owner sees of a display (the API's answer, and a computer host's)."""

    agent: str
    number: int
    running: bool
    owner_control: bool
    viewers: int


@dataclass(frozen=True)
class XRun:
    """An X program's run on an agent's display: what it printed, or None when it was input
    the owner's control held back; and whether the owner holds control now."""

    captured: Captured | None
    owner_control: bool


@dataclass
class Display:
    """One agent's virtual display inside its owner's sandbox."""

    user_id: str
    agent: str
    number: int
    sandbox: Computer | None = None
    xvfb_pid: int | None = None
    vnc_pid: int | None = None
    owner_control: bool = False
    control_since: float | None = None
    viewers: int = 0
    last_used: float = field(default_factory=time.monotonic)
    # Held while the display's processes start or its live view switches mode.
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def env(self) -> dict[str, str]:
        """The environment that points X programs at this display."""
        return {"DISPLAY": f":{self.number}"}

    @property
    def vnc_port(self) -> int:
        """The x11vnc port on the sandbox's own loopback."""
        return VNC_BASE_PORT + self.number

    def state(self) -> DisplayState:
        """The display as its owner sees it."""
        running = self.sandbox is not None and self.sandbox.alive()
        return DisplayState(self.agent, self.number, running, self.owner_control, self.viewers)

    def running_in(self, sandbox: Computer) -> bool:
        """Whether the display was started in this sandbox, which still runs."""
        return self.sandbox is sandbox and self.xvfb_pid is not None and sandbox.alive()


class Desktops:
    """Every agent's display on this server, by (user, agent); one instance per server."""

    def __init__(
        self,
        computers: Computers,
        *,
        control_wait_s: float = CONTROL_WAIT_S,
        control_hold_s: float = CONTROL_HOLD_S,
    ) -> None:
        self.computers = computers
        self.control_wait_s = control_wait_s
        self.control_hold_s = control_hold_s
        self._displays: dict[tuple[str, str], Display] = {}
        self._lock = threading.Lock()
        self._lapses: set[asyncio.Task[DisplayState]] = set()

    # ---------- finding and starting displays ----------

    def find(self, user_id: str, agent: str) -> Display | None:
        """The agent's display if it was ever started (only its owner's id finds it)."""
        return self._displays.get((user_id, agent))

    def displays_of(self, user_id: str) -> list[Display]:
        """The user's displays, by agent."""
        mine = [d for (user, _), d in list(self._displays.items()) if user == user_id]
        return sorted(mine, key=lambda d: d.agent)

    async def display(self, user_id: str, agent: str, sandbox: Computer) -> Display:
        """The agent's display, started (or restarted) in `sandbox`, which the caller holds."""
        with self._lock:
            display = self._displays.get((user_id, agent))
            evicted = None
            if display is None:
                display, evicted = self._new_display(user_id, agent)
        if evicted is not None:
            gone = evicted
            await self._serial(gone, lambda: self._kill(gone, sandbox))
        display.last_used = time.monotonic()
        if not display.running_in(sandbox):
            await self._serial(display, lambda: self._start(display, sandbox))
        return display

    def _new_display(self, user_id: str, agent: str) -> tuple[Display, Display | None]:
        mine = self.displays_of(user_id)
        evicted = None
        if len(mine) >= MAX_DISPLAYS_PER_USER:
            idle = [d for d in mine if not d.owner_control and d.viewers == 0]
            if not idle:
                raise DesktopError(
                    f"{len(mine)} desktops are open and the owner is using all of them; "
                    "ask the owner to close one, then try again"
                )
            evicted = min(idle, key=lambda d: d.last_used)
            del self._displays[(user_id, evicted.agent)]
        used = {d.number for d in self.displays_of(user_id)}
        number = next(n for n in range(FIRST_DISPLAY, FIRST_DISPLAY + 1000) if n not in used)
        display = self._displays[(user_id, agent)] = Display(user_id, agent, number)
        return display, evicted

    async def _serial(self, display: Display, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `work` under the display's lock, in a worker thread with its own event loop."""

        def locked() -> T:
            with display.lock:
                return asyncio.run(work())

        return await asyncio.to_thread(locked)

    async def _start(self, display: Display, sandbox: Computer, failed: int | None = None) -> None:
        """Start Xvfb (under the lock) unless it already runs in this sandbox; `failed`: the
        pid of an Xvfb that stopped answering (replaced unless someone did that already)."""
        if display.running_in(sandbox) and (failed is None or display.xvfb_pid != failed):
            return
        await self._kill(display, sandbox)  # what is left of it
        started = time.monotonic()
        argv = ["Xvfb", f":{display.number}", "-screen", "0", f"{WIDTH}x{HEIGHT}x{DEPTH}"]
        argv += ["-nolisten", "tcp", "-noreset"]
        log_path = f"/tmp/xvfb-{display.number}.log"
        pid = await sandbox.start_daemon(argv, output=log_path)
        wait = (
            f"i=0; until xdpyinfo -display :{display.number} >/dev/null 2>&1; do "
            'i=$((i+1)); [ "$i" -gt 200 ] && exit 1; sleep 0.05; done'
        )
        ready = await sandbox.run(["sh", "-c", wait], timeout_s=READY_TIMEOUT_S)
        if ready.exit_code != 0:
            with contextlib.suppress(SandboxError):
                await sandbox.call({"op": "kill", "pid": pid})
            detail = await tail(sandbox, log_path)
            raise DesktopError(
                f"the virtual display :{display.number} did not start ({detail}); "
                "try again, and if it keeps failing tell the owner"
            )
        display.sandbox, display.xvfb_pid = sandbox, pid
        elapsed_ms = int((time.monotonic() - started) * 1000)
        log.info("display started", extra={"display": display.number, "ms": elapsed_ms})

    async def _start_vnc(self, display: Display, sandbox: Computer) -> None:
        """Start x11vnc (under the lock) unless it runs; view-only unless the owner has control."""
        await self._start(display, sandbox)
        if display.vnc_pid is not None:
            alive = await sandbox.run(["sh", "-c", f"kill -0 {display.vnc_pid}"], timeout_s=10)
            if alive.exit_code == 0:
                return
        argv = ["x11vnc", "-display", f":{display.number}", "-rfbport", str(display.vnc_port)]
        argv += [*VNC_FLAGS, "-xkb", "-quiet", "-o", f"/tmp/x11vnc-{display.number}.log"]
        if not display.owner_control:
            argv.append("-viewonly")
        display.vnc_pid = await sandbox.start_daemon(argv)

    async def _kill(self, display: Display, sandbox: Computer) -> None:
        """Stop the display's processes (under the lock) if they run in this sandbox."""
        if display.sandbox is sandbox:
            for pid in (display.vnc_pid, display.xvfb_pid):
                if pid is not None:
                    with contextlib.suppress(SandboxError):
                        await sandbox.call({"op": "kill", "pid": pid})
        display.sandbox, display.xvfb_pid, display.vnc_pid = None, None, None

    async def states(self, user_id: str) -> list[DisplayState]:
        """The user's displays as they see them, by agent."""
        return [d.state() for d in self.displays_of(user_id)]

    async def state(self, user_id: str, agent: str) -> DisplayState | None:
        """One display as its owner sees it, None when the agent never started one."""
        display = self.find(user_id, agent)
        return None if display is None else display.state()

    # ---------- running X programs ----------

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
        """Run an X program on the agent's display (started if needed) in `sandbox`, which
        the caller holds; input (`as_input`) first waits, bounded, for the owner's control."""
        if sandbox.host is not None:
            raise SandboxError("this computer is on a computer host: its host runs the desktop")
        display = await self.display(user_id, agent, sandbox)
        if as_input and not await self.wait_for_agent(display):
            return XRun(None, True)
        captured = await self.x(display, argv, timeout_s=timeout_s)
        return XRun(captured, display.owner_control)

    async def x(
        self, display: Display, argv: Sequence[str], *, timeout_s: float = 30.0
    ) -> Captured:
        """Run an X program on the display (started again, once, if it had stopped)."""
        sandbox, pid = display.sandbox, display.xvfb_pid
        result = await self._x_once(display, argv, timeout_s)
        gone = result.exit_code == DISPLAY_GONE or (
            result.exit_code != 0 and re.search(r"open (display|X server)", result.output)
        )
        if gone and sandbox is not None:
            log.warning("display had stopped; starting it again", extra={"display": display.number})
            await self._serial(display, lambda: self._start(display, sandbox, failed=pid))
            result = await self._x_once(display, argv, timeout_s)
        return result

    async def _x_once(self, display: Display, argv: Sequence[str], timeout_s: float) -> Captured:
        sandbox = display.sandbox
        if sandbox is None or display.xvfb_pid is None:
            raise DesktopError("the display is not running; call the tool again")
        # The display's own process must still be there; else the command says so (111).
        guard = f'kill -0 "$0" 2>/dev/null || exit {DISPLAY_GONE}; exec "$@"'
        wrapped = ["sh", "-c", guard, str(display.xvfb_pid), *argv]
        return await capture(sandbox, wrapped, env=display.env, timeout_s=timeout_s)

    # ---------- the owner's control ----------

    async def wait_for_agent(self, display: Display) -> bool:
        """Wait (bounded) until the owner does not hold control; False if they still do."""
        deadline = time.monotonic() + self.control_wait_s
        while display.owner_control:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True

    async def take_control(self, user_id: str, agent: str) -> DisplayState:
        """The owner takes the display's input; the agent's input waits until `give_back`
        (or until the control lapses after `control_hold_s`)."""
        display = self._required(user_id, agent)
        sandbox = await self.computers.acquire(user_id, _control_holder(agent))
        since = time.monotonic()

        async def take() -> None:
            await self._start(display, sandbox)
            display.owner_control, display.control_since = True, since
            if display.vnc_pid is not None:
                await self._vnc_remote(display, sandbox, "noviewonly")

        try:
            await self._serial(display, take)
        except BaseException:
            await self.give_back(user_id, agent)
            raise
        loop = asyncio.get_running_loop()
        loop.call_later(self.control_hold_s, self._lapse, display, since)
        return display.state()

    def _lapse(self, display: Display, since: float) -> None:
        if display.owner_control and display.control_since == since:
            log.info("the owner's control of a display lapsed", extra={"agent": display.agent})
            task = asyncio.ensure_future(self.give_back(display.user_id, display.agent))
            self._lapses.add(task)
            task.add_done_callback(self._lapses.discard)

    async def give_back(self, user_id: str, agent: str) -> DisplayState:
        """The owner releases control: viewers only watch again and the agent goes on."""
        display = self._required(user_id, agent)

        async def give() -> None:
            sandbox = display.sandbox
            if display.owner_control and display.vnc_pid is not None and sandbox is not None:
                with contextlib.suppress(SandboxError, DesktopError):
                    await self._vnc_remote(display, sandbox, "viewonly")
            display.owner_control, display.control_since = False, None

        try:
            await self._serial(display, give)
        finally:
            await self.computers.release(_control_holder(agent))
        return display.state()

    async def _vnc_remote(self, display: Display, sandbox: Computer, command: str) -> None:
        """Switch the running x11vnc by remote control (an X property it watches). For a few
        seconds after a viewer connects x11vnc is busy measuring it and misses requests, so
        the request is written again until x11vnc acknowledges it."""
        argv = ["x11vnc", "-display", f":{display.number}", "-sync", "-R", command]
        env = {**display.env, "X11VNC_SYNC_TIMEOUT": "1.5"}
        for _ in range(8):
            result = await capture(sandbox, argv, env=env, timeout_s=10)
            if result.exit_code == 0:
                return
        raise DesktopError(f"the live view did not switch to {command}: {result.output}")

    # ---------- the live view ----------

    @contextlib.asynccontextmanager
    async def vnc(
        self, user_id: str, agent: str
    ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        """A byte stream to the display's VNC server (RFB), for as long as the block runs;
        it keeps the sandbox awake meanwhile."""
        display = self._required(user_id, agent)
        holder = f"desktop-view:{uuid.uuid4().hex}"
        sandbox = await self.computers.acquire(user_id, holder)
        display.viewers += 1
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            await self._serial(display, lambda: self._start_vnc(display, sandbox))
            argv = relay_argv(display.vnc_port)
            async with sandbox.attached(argv, [theirs.fileno(), theirs.fileno(), null]):
                theirs.close()
                reader, writer = await asyncio.open_connection(sock=ours)
                try:
                    yield reader, writer
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        finally:
            theirs.close()
            ours.close()
            os.close(null)
            display.viewers -= 1
            await self.computers.release(holder)

    # ---------- stopping ----------

    def _required(self, user_id: str, agent: str) -> Display:
        display = self._displays.get((user_id, agent))
        if display is None:
            raise LookupError(f"agent {agent!r} has no display (it has not used its desktop yet)")
        return display

    async def stop(self, user_id: str, agent: str) -> None:
        """Stop the agent's display and forget it (its next desktop tool starts a fresh one)."""
        display = self._displays.get((user_id, agent))
        if display is None:
            return
        if display.owner_control:
            await self.give_back(user_id, agent)
        with self._lock:
            self._displays.pop((user_id, agent), None)
        holder = f"desktop-stop:{uuid.uuid4().hex}"
        sandbox = await self.computers.acquire(user_id, holder)
        try:
            await self._serial(display, lambda: self._kill(display, sandbox))
        finally:
            await self.computers.release(holder)

    async def aclose(self) -> None:
        """Forget every display at shutdown (stopping the sandboxes ends their processes)."""
        for task in list(self._lapses):
            task.cancel()
        with self._lock:
            for display in self._displays.values():
                display.owner_control = False
            self._displays.clear()


def _control_holder(agent: str) -> str:
    return f"desktop-control:{agent}"
