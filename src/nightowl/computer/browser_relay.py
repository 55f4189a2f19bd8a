"""The launcher relay: how Playwright on the host starts Chromium inside a user's sandbox.

Playwright runs a tiny launcher as its "browser"; the launcher connects to the relay's
root-only unix socket, proves itself with a one-time token, and hands over its descriptors
(0-2, and the DevTools pipe on 3 and 4) and argv; the relay starts Chromium with them inside
the sandbox and ties the two lives together.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Any

from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import HOME_INSIDE, SandboxError

log = logging.getLogger(__name__)

CHROMIUM = "/usr/bin/chromium"
PROFILE_INSIDE = f"{HOME_INSIDE}/.browser/profile"
ENV_INSIDE = {"DBUS_SESSION_BUS_ADDRESS": "disabled:"}
MAX_SOCKET_PATH = 100
PIPE_FDS = 5  # stdin, stdout, stderr, and Playwright's pipe (3: to the browser, 4: from it)

# Chromium without its own sandbox (the user's sandbox is the boundary), GPU or background calls.
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The launcher Playwright runs as "the browser": standard library only, no nightowl imports.
LAUNCHER_SOURCE = """
import json, os, socket, sys
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(os.environ["NIGHTOWL_BROWSER_SOCKET"])
    hello = {"token": os.environ["NIGHTOWL_BROWSER_TOKEN"], "argv": sys.argv[1:]}
    socket.send_fds(conn, [json.dumps(hello).encode() + b"\\n"], [0, 1, 2, 3, 4])
except (OSError, KeyError) as error:
    sys.stderr.write("nightowl browser launcher: cannot reach the server (%s)\\n" % error)
    sys.exit(1)
for fd in (0, 3, 4):  # the pipe must close when Chromium ends, not when we do
    os.close(fd)
answer = conn.makefile("rb").readline()  # Chromium's exit code, once it has ended
if answer.startswith(b"error "):
    sys.stderr.write(answer[6:].decode(errors="replace"))
    sys.exit(1)
sys.exit(int(answer.strip() or b"1"))
"""


class BrowserError(RuntimeError):
    """The browser could not start or do what was asked (the message says what to do)."""


class Relay:
    """The root-only socket launchers call; runs what they hand over inside their sandbox."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "relay.sock"
        if len(str(self.path)) > MAX_SOCKET_PATH:
            raise BrowserError(f"the browser's socket path is too long: {self.path}")
        self._pending: dict[str, Computer] = {}  # by token: launches not yet called in
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, asyncio.Task[Any]] = {}  # by token: the Chromium it runs
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._listener.listen(16)
        self._listener.setblocking(False)
        self._serving = asyncio.get_running_loop().create_task(self._serve())

    def expect(self, sandbox: Computer) -> str:
        """A one-time token for the next launcher, which will run inside `sandbox`."""
        token = secrets.token_hex(32)
        self._pending[token] = sandbox
        return token

    def forget(self, token: str) -> None:
        """Drop a token that was not (or no longer needs to be) used."""
        self._pending.pop(token, None)

    def kill(self, token: str) -> None:
        """Kill the Chromium started with this token (its sandbox request ends)."""
        task = self._running.get(token)
        if task is not None:
            task.cancel()

    def _claim(self, token: object) -> tuple[str, Computer] | None:
        for known in list(self._pending):
            if isinstance(token, str) and hmac.compare_digest(known, token):
                return known, self._pending.pop(known)
        return None

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._listener)
            except OSError:  # out of descriptors, for one: keep serving
                log.exception("browser relay: accepting a launcher failed")
                await asyncio.sleep(0.5)
                continue
            task = loop.create_task(self._handle(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        claimed = ""
        try:
            conn.setblocking(True)
            conn.settimeout(10)
            hello, fds = await asyncio.to_thread(_receive_hello, conn)
            claim = self._claim(hello.get("token"))
            if claim is None or len(fds) != PIPE_FDS or not isinstance(hello.get("argv"), list):
                log.warning("browser relay: refused a launcher without a valid token")
                return
            conn.setblocking(False)
            claimed, sandbox = claim
            task = asyncio.current_task()
            if task is not None:
                self._running[claimed] = task
            code = await self._run(sandbox, [str(a) for a in hello["argv"]], fds, conn)
            await asyncio.get_running_loop().sock_sendall(conn, f"{code}\n".encode())
        except (OSError, ValueError, SandboxError) as error:
            with contextlib.suppress(OSError):
                conn.setblocking(True)
                conn.sendall(f"error {error}\n".encode())
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            conn.close()
            self._running.pop(claimed, None)

    async def _run(
        self, sandbox: Computer, argv: list[str], fds: list[int], conn: socket.socket
    ) -> int:
        """Chromium inside, until it exits or its launcher goes (then it is killed)."""
        inside = [CHROMIUM, *(_inside_arg(arg) for arg in argv)]
        loop = asyncio.get_running_loop()
        async with sandbox.attached(inside, fds, env=ENV_INSIDE) as reader:
            for fd in fds:
                os.close(fd)  # the sandbox holds them now
            fds.clear()
            ended = asyncio.ensure_future(reader.readline())
            gone = asyncio.ensure_future(loop.sock_recv(conn, 1))
            try:
                await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in (ended, gone):
                    waiting.cancel()
            if ended.done() and not ended.cancelled() and ended.result():
                return int(json.loads(ended.result()).get("exit", 1))
            return 1

    async def close(self) -> None:
        """Stop listening and kill every browser it started."""
        for task in [self._serving, *self._tasks]:
            task.cancel()
        await asyncio.gather(self._serving, *self._tasks, return_exceptions=True)
        self._listener.close()


async def prepare_profile(sandbox: Computer) -> None:
    """The profile folder in the home, made by the sandbox's own user; stale locks removed
    (a restored snapshot still names the Chromium of the sandbox it came from)."""
    script = f'mkdir -p "{PROFILE_INSIDE}" && rm -f "{PROFILE_INSIDE}"/Singleton*'
    result = await sandbox.run(["/bin/sh", "-c", script], timeout_s=30)
    if result.exit_code != 0:
        raise BrowserError(f"could not prepare the browser profile (exit {result.exit_code})")


def _receive_hello(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The launcher's first message and descriptors (blocking; bounded by the socket timeout)."""
    data, fds, _, _ = socket.recv_fds(conn, 65536, PIPE_FDS + 1)
    with contextlib.suppress(OSError):  # a cut-short message is refused below
        while not data.endswith(b"\n") and len(data) < 1_000_000:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    try:
        hello = json.loads(data)
    except ValueError:
        hello = None
    return (hello if isinstance(hello, dict) else {}), list(fds)


def _inside_arg(arg: str) -> str:
    # Playwright names a placeholder profile on the host; inside, the profile is in the home.
    return f"--user-data-dir={PROFILE_INSIDE}" if arg.startswith("--user-data-dir=") else arg
