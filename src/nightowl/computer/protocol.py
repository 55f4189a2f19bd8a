"""What a user's computer is to the rest of the server, wherever it runs.

A `Computer` is one user's computer, awake and held by the caller (a turn): a `Sandbox` in
this process (sandbox.py) or a `RemoteSandbox` on a computer host (remote.py). Tools and the
engine use only what is stated here; where the two truly differ (a browser or a command's
stdio reached over a websocket, a file written without passing a descriptor) the difference
is a method of each, not a branch at the caller. Each implementation states that it meets
this protocol in a `TYPE_CHECKING` block, so mypy checks both. A `ComputerPool` hands them
out: `Computers` (computers.py) or `RemoteComputers` (remote.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from nightowl.computer.sandbox import ExecResult

# A websocket address and the headers that open it.
Endpoint = tuple[str, dict[str, str]]


@runtime_checkable
class Computer(Protocol):
    """One user's computer, awake and held by the caller: run commands and file operations
    in it, as its own user."""

    @property
    def host(self) -> str | None:
        """The computer host it runs on; None when it runs in this process."""
        ...

    def alive(self) -> bool:
        """Whether it still runs, as far as this process can tell."""
        ...

    async def run(
        self,
        command: str | Sequence[str],
        *,
        output: str | None = None,
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        fds: Sequence[int] = (),
    ) -> ExecResult:
        """Run a command inside and wait for it; cancelling this kills it and its children."""
        ...

    async def call(self, request: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """One request to its supervisor with one answer (read, write, list, search, kill)."""
        ...

    async def start_daemon(
        self,
        argv: Sequence[str],
        *,
        output: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> int:
        """Start a long-running process inside (a display, a server); its pid inside."""
        ...

    def attached(
        self, argv: Sequence[str], fds: Sequence[int], env: dict[str, str] | None = None
    ) -> AbstractAsyncContextManager[asyncio.StreamReader]:
        """Run a command with the caller's descriptors, killed when the block ends (only a
        computer in this process: SandboxError on a host)."""
        ...

    async def write_bytes(self, path: str, content: bytes) -> ExecResult:
        """Write a file as the computer's user, from inside (root never writes into the
        home), its folder made; how the writing ended."""
        ...

    def is_same_computer(self, other: Computer | None) -> bool:
        """Whether `other` is a handle on this very computer, still running (a session
        started in it may serve a call that holds `other`)."""
        ...

    def browser_endpoint(self) -> Endpoint | None:
        """Where its host serves the user's browser (Chromium's DevTools protocol, for
        Playwright's connect_over_cdp); None when the browser is launched here."""
        ...

    def stdio_endpoint(self) -> Endpoint | None:
        """Where its host runs a command with its stdio carried over (computer/stdio_host.py);
        None when the command runs attached, here."""
        ...


class ComputerPool(Protocol):
    """The users' computers, one per user, wherever they run: `Computers` in this process
    (computers.py) or `RemoteComputers` on a computer tier (remote.py)."""

    @property
    def homes_here(self) -> bool:
        """Whether the computers' homes are folders on this machine (`home`); when not, a
        file in one is read inside its computer."""
        ...

    async def acquire(self, user_id: str, holder: str) -> Computer:
        """The user's computer, awake and held by `holder` until `release`."""
        ...

    async def release(self, holder: str) -> None:
        """`holder` is done: each computer no one holds any more is frozen."""
        ...

    def take_notice(self, holder: str) -> str | None:
        """What the agent must be told about its computer since the last call (once)."""
        ...

    async def deep_sleep(self, user_id: str) -> bool:
        """Put the computer to sleep, its home kept as a snapshot; False if it is held."""
        ...

    async def destroy(self, user_id: str) -> None:
        """Kill the computer's sandbox (its home stays); the next acquire starts a fresh one."""
        ...

    async def remove(self, user_id: str) -> None:
        """The computer is gone for good: sandbox, home and placement."""
        ...

    def home(self, user_id: str) -> Path:
        """The user's home on this machine (a path that never exists when not `homes_here`)."""
        ...

    def state(self, user_id: str) -> str:
        """'off', 'running' or 'frozen', as this process sees it."""
        ...
