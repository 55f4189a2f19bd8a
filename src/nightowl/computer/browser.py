"""The agent's web browser: Chromium inside the user's sandbox, driven by Playwright.

Playwright (on the host) starts its "browser" with `--remote-debugging-pipe` on fds 3 and 4.
Its executable is a tiny launcher that hands those descriptors (and 0-2 and its argv) over a
root-only unix socket to this server, authenticated by a one-time token; the server runs
Chromium with them inside the sandbox (its uid, its namespaces, its network policy), with the
profile in the sandbox home so logins survive sleeps. When the launcher goes, Chromium is
killed; when Chromium ends, the launcher is told and exits. Root on the host never touches the
home: the profile is prepared from inside, and Playwright only sees a placeholder directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from playwright.async_api import BrowserContext, Page, Playwright, async_playwright

from nightowl.computer.computers import Computers
from nightowl.computer.sandbox import HOME_INSIDE, Sandbox, SandboxError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

CHROMIUM = "/usr/bin/chromium"
PROFILE_INSIDE = f"{HOME_INSIDE}/.browser/profile"
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
ENV_INSIDE = {"DBUS_SESSION_BUS_ADDRESS": "disabled:"}
LAUNCH_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 10.0
MAX_SOCKET_PATH = 100
PIPE_FDS = 5  # stdin, stdout, stderr, and Playwright's pipe (3: to the browser, 4: from it)

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


class _Relay:
    """The root-only socket launchers call; runs what they hand over inside their sandbox."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "relay.sock"
        if len(str(self.path)) > MAX_SOCKET_PATH:
            raise BrowserError(f"the browser's socket path is too long: {self.path}")
        self._pending: dict[str, Sandbox] = {}  # by token: launches not yet called in
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, asyncio.Task[Any]] = {}  # by token: the Chromium it runs
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._listener.listen(16)
        self._listener.setblocking(False)
        self._serving = asyncio.get_running_loop().create_task(self._serve())

    def expect(self, sandbox: Sandbox) -> str:
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

    def _claim(self, token: object) -> tuple[str, Sandbox] | None:
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
        self, sandbox: Sandbox, argv: list[str], fds: list[int], conn: socket.socket
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


@dataclass
class BrowserSession:
    """One user's browser: the sandbox it runs in, its Playwright context (one profile, so
    logins are shared), and a tab of its own for each agent of the user."""

    user_id: str
    sandbox: Sandbox
    context: BrowserContext
    spare: Page | None  # the blank tab the browser opened with, for the first agent
    token: str
    pages: dict[str, Page] = field(default_factory=dict)
    agent: str = ""  # whose call runs now (calls are one at a time, under `lock`)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False
    used_at: float = field(default_factory=time.monotonic)

    def usable(self, sandbox: Sandbox) -> bool:
        """Whether this browser still runs in the given (current) sandbox."""
        return not self.closed and self.sandbox is sandbox and sandbox.alive()

    async def ensure_tab(self, agent: str) -> None:
        """Make `agent` the current caller, with a tab of its own."""
        self.agent = agent
        page = self.pages.get(agent)
        if page is not None and not page.is_closed():
            return
        if self.spare is not None and not self.spare.is_closed():
            page, self.spare = self.spare, None
        else:
            page = await self.context.new_page()
        self._own(agent, page)

    def _own(self, agent: str, page: Page) -> None:
        self.pages[agent] = page
        # A link the agent opens in a new tab becomes its current tab.
        page.on("popup", lambda popup: self._own(agent, popup))

    def current_page(self) -> Page:
        """The current agent's tab."""
        page = self.pages.get(self.agent)
        if page is None or page.is_closed():
            raise BrowserError("your browser tab is closed; open a URL first")
        return page


class Browsers:
    """The browsers of this server, one per user; made once, closed on shutdown."""

    def __init__(
        self,
        computers: Computers,
        runtime_dir: Path | None = None,
        launch_timeout_s: float = LAUNCH_TIMEOUT_S,
    ) -> None:
        self.computers = computers
        self.launch_timeout_s = launch_timeout_s
        self._runtime_dir = runtime_dir
        self._made_runtime_dir = False
        self._sessions: dict[str, BrowserSession] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._playwright: Playwright | None = None
        self._relay: _Relay | None = None
        self._start_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # where Playwright lives

    async def _start(self) -> tuple[Playwright, _Relay, Path]:
        async with self._start_lock:
            self._loop = self._loop or asyncio.get_running_loop()
            if self._runtime_dir is None:
                self._runtime_dir = Path(tempfile.mkdtemp(prefix="nightowl-browser-"))
                self._made_runtime_dir = True
            folder = self._runtime_dir
            if self._relay is None:
                await asyncio.to_thread(_prepare_runtime_dir, folder)
                self._relay = _Relay(folder)
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            return self._playwright, self._relay, folder

    async def use(
        self,
        user_id: str,
        sandbox: Sandbox,
        work: Callable[[BrowserSession], Awaitable[_T]],
        agent: str = "",
    ) -> _T:
        """Run `work` with the user's browser in `sandbox` (the caller holds it awake) on
        `agent`'s own tab, started if needed; one call at a time, on Playwright's loop."""

        async def job() -> _T:
            async with self._locks.setdefault(user_id, asyncio.Lock()):
                session = self._sessions.get(user_id)
                if session is None or not session.usable(sandbox):
                    if session is not None:
                        await self._close_context(session)
                    session = self._sessions[user_id] = await self._launch(user_id, sandbox)
                session.used_at = time.monotonic()
            async with session.lock:
                await session.ensure_tab(agent)
                return await work(session)

        return await self._on_own_loop(job())

    async def _launch(self, user_id: str, sandbox: Sandbox) -> BrowserSession:
        playwright, relay, folder = await self._start()
        await _prepare_profile(sandbox)
        placeholder = folder / "profiles" / user_id
        await asyncio.to_thread(placeholder.mkdir, mode=0o700, parents=True, exist_ok=True)
        token = relay.expect(sandbox)
        try:
            context = await playwright.chromium.launch_persistent_context(
                str(placeholder),
                executable_path=str(folder / "launcher"),
                args=CHROMIUM_ARGS,
                env={"NIGHTOWL_BROWSER_SOCKET": str(relay.path), "NIGHTOWL_BROWSER_TOKEN": token},
                headless=True,
                accept_downloads=False,
                viewport={"width": 1280, "height": 800},
                timeout=self.launch_timeout_s * 1000,
            )
        except Exception as error:
            raise BrowserError(f"the browser did not start in the computer ({error})") from error
        finally:
            relay.forget(token)  # used by now, or never to be
        context.set_default_timeout(15_000)
        context.set_default_navigation_timeout(30_000)
        spare = context.pages[0] if context.pages else None
        session = BrowserSession(user_id, sandbox, context, spare, token)

        def closed(_context: BrowserContext) -> None:
            session.closed = True

        context.on("close", closed)
        log.info("browser started", extra={"user": user_id})
        return session

    async def _on_own_loop(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Run `work` on the loop Playwright lives on: turns (DBOS) run on another loop than
        the server's own tasks, which may call close_user, close_idle and close."""
        loop = self._loop
        if loop is None or loop is asyncio.get_running_loop():
            return await work
        if loop.is_closed() or not loop.is_running():
            work.close()
            raise BrowserError("the browsers' event loop has stopped")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, loop))

    async def close_user(self, user_id: str) -> None:
        """Close the user's browser cleanly, so its profile (cookies, logins) is on disk; call
        it before the sandbox sleeps. A frozen sandbox is thawed for the moment it takes."""
        await self._on_own_loop(self._close_user(user_id))

    async def _close_user(self, user_id: str) -> None:
        async with self._locks.setdefault(user_id, asyncio.Lock()):
            session = self._sessions.pop(user_id, None)
            if session is None:
                return
            if not session.usable(session.sandbox) or self.computers.state(user_id) == "off":
                await self._close_context(session)  # nothing left to flush
                return
            holder = f"browser-close:{user_id}"
            try:
                with contextlib.suppress(SandboxError, OSError):
                    await self.computers.acquire(user_id, holder)  # thaws it
                await self._close_context(session)
            finally:
                await self.computers.release(holder)

    async def close_idle(self, idle_s: float) -> int:
        """Close the browsers unused for `idle_s` seconds, so their profiles are on disk
        before their sandboxes sleep (and their memory is free); how many were closed."""
        return await self._on_own_loop(self._close_idle(idle_s))

    async def _close_idle(self, idle_s: float) -> int:
        now = time.monotonic()
        idle = [
            user_id
            for user_id, session in self._sessions.items()
            if now - session.used_at >= idle_s and not session.lock.locked()
        ]
        for user_id in idle:
            await self._close_user(user_id)
        return len(idle)

    async def _close_context(self, session: BrowserSession) -> None:
        session.closed = True
        # Chromium flushes its profile and exits; if it cannot answer, it is killed.
        try:
            await asyncio.wait_for(session.context.close(), CLOSE_TIMEOUT_S)
        except Exception:
            if self._relay is not None:
                self._relay.kill(session.token)

    async def close(self) -> None:
        """Close every browser, the relay and Playwright (on server shutdown, before the loop
        the turns run on stops; after, Chromium dies with its sandbox and the driver)."""
        with contextlib.suppress(BrowserError):
            await self._on_own_loop(self._close())
        if self._made_runtime_dir and self._runtime_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._runtime_dir, True)

    async def _close(self) -> None:
        for user_id in list(self._sessions):
            await self._close_user(user_id)
        if self._relay is not None:
            await self._relay.close()
            self._relay = None
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None


def _prepare_runtime_dir(folder: Path) -> None:
    """The root-only folder of the relay socket, the launcher and the placeholder profiles."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    (folder / "relay.sock").unlink(missing_ok=True)
    launcher = folder / "launcher"
    launcher.write_text(f"#!{sys.executable} -IS\n{LAUNCHER_SOURCE}")
    os.chmod(launcher, 0o700)


async def _prepare_profile(sandbox: Sandbox) -> None:
    """The profile folder in the home, made by the sandbox's own user; stale locks removed
    (a restored snapshot still names the Chromium of the sandbox it came from)."""
    script = f'mkdir -p "{PROFILE_INSIDE}" && rm -f "{PROFILE_INSIDE}"/Singleton*'
    result = await sandbox.run(["/bin/sh", "-c", script], timeout_s=30)
    if result.exit_code != 0:
        raise BrowserError(f"could not prepare the browser profile (exit {result.exit_code})")


async def close_idle_browsers_forever(browsers: Browsers, idle_s: float, interval_s: float) -> None:
    """The background sweep that closes browsers unused for `idle_s` (profiles flushed)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await browsers.close_idle(idle_s)
        except Exception:
            log.exception("closing idle browsers failed")
