"""A worker's view of a computer tier: the users' computers on other machines.

`RemoteComputers` is a `ComputerPool` (protocol.py: `acquire` a computer for a holder,
`release`, `deep_sleep`, `destroy`, `take_notice`), and its `RemoteSandbox` a `Computer` (`run`,
`call`, `start_daemon`, ...), as `Computers` and `Sandbox` are in process. A computer is placed on
one host at a time (the database says which, under the host's lease): a request goes there;
when that host does not answer, the next `acquire` waits for its lease to lapse and another
host wakes the computer from its last snapshot, with a notice for the agent. Two websockets
serve what needs descriptors passed into the sandbox in process: `browser_endpoint`, the user's
Chromium's DevTools protocol (browser_host.py), which Playwright connects to over CDP, and
`stdio_endpoint`, a command's stdio (stdio_host.py: MCP servers in the computer). The desktop
is the host's own: it runs the displays, reached through remote_desktop.py (desktop_host.py).
Attachments are read inside the computer too (tools/messaging.py `attach_remote_files`):
`home` is no folder here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from nightowl.computer.sandbox import ExecResult, SandboxError
from nightowl.safety.redaction import Redactor
from nightowl.store.computers import placement_of
from nightowl.store.database import Database
from nightowl.store.tables import utcnow

if TYPE_CHECKING:
    from nightowl.computer.protocol import Computer, ComputerPool, Endpoint


class HostUnreachable(SandboxError):
    """The computer host did not answer (it stopped, or the network failed)."""


class RemoteSandbox:
    """A user's sandbox on a computer host, held by one holder (a turn)."""

    def __init__(self, tier: RemoteComputers, host: str, user_id: str, holder: str) -> None:
        self.tier, self.host, self.user_id, self.holder = tier, host, user_id, holder

    def alive(self) -> bool:
        """Whether the tier still holds this handle: not released, and its host not found
        dead (the host itself knows whether the computer runs)."""
        return self.tier.holds(self)

    async def post(self, route: str, body: dict[str, Any], timeout_s: float | None) -> Any:
        """One request about this computer to its host (`route` under its path)."""
        path = f"/v1/computers/{self.user_id}/{route}"
        try:
            return await self.tier.post(self.host, path, body, timeout_s)
        except HostUnreachable:
            self.tier.forget(self)  # the next acquire finds the computer a live host
            raise

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
        """Run a command in the computer and wait; cancelling this kills it (the host sees
        the request go away)."""
        if fds:
            raise SandboxError(
                "passing descriptors into a sandbox is not served by a computer host"
            )
        body: dict[str, Any] = {"holder": self.holder, "output": output, "timeout_s": timeout_s}
        body |= {"cwd": cwd, "env": env or {}}
        if isinstance(command, str):
            body["command"] = command
        else:
            body["argv"] = list(command)
        wait = None if timeout_s is None else timeout_s + 30
        answer = await self.post("run", body, wait)
        return ExecResult(answer["exit_code"], bool(answer["timed_out"]))

    async def call(self, request: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """One request with one answer (file operations, kill)."""
        body = {"holder": self.holder, "request": request, "timeout_s": timeout_s}
        answer: dict[str, Any] = await self.post("call", body, timeout_s + 30)
        return answer

    async def start_daemon(
        self,
        argv: Sequence[str],
        *,
        output: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> int:
        """Start a long-running process in the computer; its pid there."""
        body: dict[str, Any] = {"holder": self.holder, "argv": list(argv), "output": output}
        body |= {"env": env or {}, "cwd": cwd}
        return int((await self.post("daemon", body, 60))["pid"])

    async def write_bytes(self, path: str, content: bytes) -> ExecResult:
        """Write a file as the computer's user, from inside; no descriptor crosses to a host,
        so the bytes go as base64 text (the supervisor writes text) and are decoded in place."""
        encoded = f"{path}.base64-{secrets.token_hex(4)}"
        await self.call(
            {"op": "write", "path": encoded, "content": base64.b64encode(content).decode()}
        )
        script = 'base64 -d "$1" > "$2"; status=$?; rm -f "$1"; exit $status'
        return await self.run(["/bin/sh", "-c", script, "sh", encoded, path], timeout_s=30)

    def is_same_computer(self, other: Computer | None) -> bool:
        """Whether `other` is a handle on the same user's computer on the same host (a
        handle is per turn; the host knows whether the computer still runs)."""
        return isinstance(other, RemoteSandbox) and (other.host, other.user_id) == (
            self.host,
            self.user_id,
        )

    def browser_endpoint(self) -> Endpoint:
        """The websocket address of the user's browser on the host (Chromium's DevTools
        protocol, for Playwright's connect_over_cdp) and the headers that open it."""
        return self._websocket("browser"), dict(self.tier.headers)

    def stdio_endpoint(self) -> Endpoint:
        """The websocket address that runs a command in the computer with its stdio carried
        over (computer/stdio_host.py) and the headers that open it."""
        return self._websocket("stdio"), dict(self.tier.headers)

    def _websocket(self, route: str) -> str:
        address = websocket_address(self.host, self.user_id, route)
        return f"{address}?holder={quote(self.holder, safe='')}"

    @contextlib.asynccontextmanager
    async def attached(
        self, argv: Sequence[str], fds: Sequence[int], env: dict[str, str] | None = None
    ) -> AsyncIterator[asyncio.StreamReader]:
        """Not served remotely: a descriptor cannot cross to another machine."""
        raise SandboxError("this needs the computer in the worker's own process")
        yield asyncio.StreamReader()  # pragma: no cover (makes this an async generator)


if TYPE_CHECKING:
    _IS_A_COMPUTER: type[Computer] = RemoteSandbox  # mypy checks that it meets the protocol


def websocket_address(host: str, user_id: str, route: str) -> str:
    """The websocket address of a route about a user's computer on `host`."""
    scheme, rest = host.split("://", 1)
    ws = {"http": "ws", "https": "wss"}.get(scheme, scheme)
    return f"{ws}://{rest}/v1/computers/{quote(user_id)}/{route}"


class RemoteComputers:
    """The users' computers on a computer tier, reached over HTTP with the tier's token."""

    def __init__(
        self,
        hosts: Sequence[str],
        token: str,
        database: Database,
        wait_s: float,
        redactor_for: Callable[[str], Redactor | None] | None = None,
    ) -> None:
        if not hosts:
            raise ValueError("a computer tier needs at least one host address")
        self.hosts = [h.rstrip("/") for h in hosts]
        self.database = database
        self.wait_s = wait_s  # how long acquire may wait for a dead host's lease to lapse
        self.headers = {"Authorization": f"Bearer {token}"}
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient]
        self._clients = weakref.WeakKeyDictionary()
        self._held: dict[str, set[str]] = {}  # holder → the hosts it holds a computer on
        # (holder, user) → the sandbox acquired: later calls of the turn skip the round trip.
        self._sandboxes: dict[tuple[str, str], RemoteSandbox] = {}
        self._notices: dict[str, str] = {}
        # Kept for the composition root's wiring; a host runs its own sleep hooks.
        self.before_sleep: list[Callable[[str], Awaitable[None]]] = []
        self.redactor_for = redactor_for

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()  # a client belongs to one event loop
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = httpx.AsyncClient(headers=self.headers)
        return client

    async def send(
        self, method: str, host: str, path: str, body: Any, timeout_s: float | None
    ) -> httpx.Response:
        """One request to a host, its answer whatever its status (HostUnreachable when it
        does not answer)."""
        try:
            return await self._client().request(
                method, f"{host}{path}", json=body, timeout=timeout_s
            )
        except httpx.TransportError as error:
            raise HostUnreachable(f"the computer host {host} does not answer ({error!r})") from None

    async def post(
        self, host: str, path: str, body: dict[str, Any], timeout_s: float | None
    ) -> Any:
        """One request to a host; SandboxError with the host's reason when it refuses."""
        response = await self.send("POST", host, path, body, timeout_s)
        if response.status_code == 409:
            raise SandboxError(str(response.json().get("error")))
        if response.status_code != 200:
            raise SandboxError(f"the computer host {host} answered {response.status_code}")
        return response.json()

    def placed_host(self, user_id: str) -> str | None:
        """The host the computer is placed on under a live lease; None when on none (asleep,
        new, or its host died)."""
        with self.database.read() as session:
            placement = placement_of(session, user_id)
        if placement.host and placement.until and placement.until >= utcnow():
            return placement.host
        return None

    def _candidates(self, user_id: str) -> list[str]:
        """Hosts to try, the one the computer is placed on (its lease alive) first."""
        placed = self.placed_host(user_id)
        return [placed] if placed else list(self.hosts)

    async def acquire(self, user_id: str, holder: str) -> RemoteSandbox:
        """The user's computer, awake on its host and held by `holder` until `release`."""
        held = self._sandboxes.get((holder, user_id))
        if held is not None:
            return held
        deadline = time.monotonic() + self.wait_s
        why = "no computer host answered"
        while time.monotonic() < deadline:
            for host in await asyncio.to_thread(self._candidates, user_id):
                try:
                    answer = await self.post(
                        host, f"/v1/computers/{user_id}/acquire", {"holder": holder}, 120
                    )
                except SandboxError as error:
                    why = str(error)
                    continue  # dead, or placed elsewhere since: the next round reads again
                self._held.setdefault(holder, set()).add(host)
                if answer.get("notice"):
                    self._notices[holder] = str(answer["notice"])
                sandbox = self._sandboxes[holder, user_id] = RemoteSandbox(
                    self, host, user_id, holder
                )
                return sandbox
            await asyncio.sleep(0.25)
        raise SandboxError(f"no computer host could wake this computer: {why}")

    async def put_file(self, user_id: str, path: str, data: bytes) -> None:
        """Write a file into the computer's home on its host (one received on a channel),
        inside the computer as its user: a link the computer made leads nowhere it could not
        write itself. Wakes the computer if it sleeps (a turn about the file follows)."""
        holder = f"put-{secrets.token_hex(8)}"
        try:
            sandbox = await self.acquire(user_id, holder)
            content = base64.b64encode(data).decode()
            request = {"op": "write", "path": path, "content": content, "encoding": "base64"}
            await sandbox.call(request, timeout_s=120)  # a refusal raises SandboxError
        finally:
            await self.release(holder)

    def holds(self, sandbox: RemoteSandbox) -> bool:
        """Whether `sandbox` is the handle its holder holds now (released or forgotten: no)."""
        return self._sandboxes.get((sandbox.holder, sandbox.user_id)) is sandbox

    def forget(self, sandbox: RemoteSandbox) -> None:
        """Drop a sandbox whose host stopped answering."""
        self._sandboxes.pop((sandbox.holder, sandbox.user_id), None)

    def take_notice(self, holder: str) -> str | None:
        """What the agent must be told about its computer since the last call (once)."""
        return self._notices.pop(holder, None)

    async def release(self, holder: str) -> None:
        """`holder` is done: each host it used freezes (and snapshots) what no one holds."""
        for key in [k for k in self._sandboxes if k[0] == holder]:
            del self._sandboxes[key]
        for host in self._held.pop(holder, set()):
            with contextlib.suppress(SandboxError):
                await self.post(host, f"/v1/holders/{holder}/release", {}, 300)

    async def _on_its_host(self, user_id: str, route: str) -> Any:
        with self.database.read() as session:
            placement = placement_of(session, user_id)
        if placement.host is None:
            return None  # on no host: asleep already
        return await self.post(placement.host, f"/v1/computers/{user_id}/{route}", {}, 300)

    async def deep_sleep(self, user_id: str) -> bool:
        """Put the computer to sleep on its host (its home then lives in its snapshot)."""
        answer = await self._on_its_host(user_id, "sleep")
        return True if answer is None else bool(answer["slept"])

    async def destroy(self, user_id: str) -> None:
        """Kill the computer's sandbox on its host (its home stays)."""
        await self._on_its_host(user_id, "destroy")

    async def remove(self, user_id: str) -> None:
        """Remove the computer on its host: sandbox, home and placement (asleep, on no
        host, it has nothing on any host)."""
        await self._on_its_host(user_id, "remove")

    async def sleep_idle(self) -> int:
        """Hosts put their idle computers to sleep themselves."""
        return 0

    @property
    def homes_here(self) -> bool:
        """False: the homes are on the hosts; a file is read inside its computer."""
        return False

    def home(self, user_id: str) -> Path:
        """Not on this machine: a path that never exists here."""
        return Path("/nonexistent/nightowl-computer-tier") / user_id

    def state(self, user_id: str) -> str:
        """Unknown to a worker: 'off' (the host knows)."""
        return "off"

    def close(self) -> None:
        """Nothing held open across event loops needs closing (the clients go with them)."""


if TYPE_CHECKING:
    _IS_A_POOL: type[ComputerPool] = RemoteComputers  # mypy checks that it meets the protocol
