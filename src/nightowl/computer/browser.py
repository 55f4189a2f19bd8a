"""The agent's web browser: Chromium inside the user's sandbox, driven by Playwright.

On a computer tier the host starts Chromium and serves its DevTools protocol on a websocket
(browser_host.py); Playwright connects to it over CDP instead of launching. In this process:

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
import importlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from nightowl.computer.browser_relay import (
    CHROMIUM_ARGS,
    LAUNCHER_SOURCE,
    BrowserError,
    Relay,
    prepare_profile,
)
from nightowl.computer.computers import Computers
from nightowl.computer.protocol import Computer, Endpoint
from nightowl.computer.sandbox import SandboxError

if TYPE_CHECKING:  # Playwright loads with the first browser (0.3 s of every server start)
    from playwright.async_api import Browser, BrowserContext, Page, Playwright

log = logging.getLogger(__name__)
_T = TypeVar("_T")

LAUNCH_TIMEOUT_S = 30.0
CLOSE_TIMEOUT_S = 10.0


@dataclass
class BrowserSession:
    """One user's browser: the sandbox it runs in, its Playwright context (one profile, so
    logins are shared), and a tab of its own for each agent of the user."""

    user_id: str
    sandbox: Computer
    context: BrowserContext
    spare: Page | None  # the blank tab the browser opened with, for the first agent
    token: str  # the relay's for a browser in this process ("" for one on a computer host)
    browser: Browser | None = None  # the connection to a computer host's browser
    pages: dict[str, Page] = field(default_factory=dict)
    agent: str = ""  # whose call runs now (calls are one at a time, under `lock`)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False
    used_at: float = field(default_factory=time.monotonic)

    def usable(self, sandbox: Computer) -> bool:
        """Whether this browser still runs in the given (current) sandbox."""
        if self.closed:
            return False
        if sandbox.host is not None:  # one handle per turn; the host decides
            return (
                self.sandbox.host == sandbox.host
                and self.browser is not None
                and self.browser.is_connected()
            )
        return sandbox.is_same_computer(self.sandbox)

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
        self._relay: Relay | None = None
        self._start_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # where Playwright lives

    async def _start_playwright(self) -> Playwright:
        async with self._start_lock:
            self._loop = self._loop or asyncio.get_running_loop()
            if self._playwright is None:
                async_api = await asyncio.to_thread(importlib.import_module, "playwright.async_api")
                self._playwright = await async_api.async_playwright().start()
            return self._playwright

    async def _start(self) -> tuple[Playwright, Relay, Path]:
        playwright = await self._start_playwright()
        async with self._start_lock:
            if self._runtime_dir is None:
                self._runtime_dir = Path(tempfile.mkdtemp(prefix="nightowl-browser-"))
                self._made_runtime_dir = True
            folder = self._runtime_dir
            if self._relay is None:
                await asyncio.to_thread(_prepare_runtime_dir, folder)
                self._relay = Relay(folder)
            return playwright, self._relay, folder

    async def use(
        self,
        user_id: str,
        sandbox: Computer,
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
                session.sandbox = sandbox  # the current turn's handle (a tier's differ)
                session.used_at = time.monotonic()
            async with session.lock:
                await session.ensure_tab(agent)
                return await work(session)

        return await self._on_own_loop(job())

    async def _launch(self, user_id: str, sandbox: Computer) -> BrowserSession:
        endpoint = sandbox.browser_endpoint()
        if endpoint is not None:  # on a computer host
            return await self._connect(user_id, sandbox, endpoint)
        playwright, relay, folder = await self._start()
        await prepare_profile(sandbox)
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
        session = _new_session(user_id, sandbox, context, token)
        log.info("browser started", extra={"user": user_id})
        return session

    async def _connect(self, user_id: str, sandbox: Computer, endpoint: Endpoint) -> BrowserSession:
        """The user's browser on their computer's host, over CDP (the host starts it)."""
        playwright = await self._start_playwright()
        address, headers = endpoint
        try:
            browser = await playwright.chromium.connect_over_cdp(
                address, headers=headers, timeout=self.launch_timeout_s * 1000
            )
        except Exception as error:
            raise BrowserError(
                f"the browser did not start on the computer's host ({error})"
            ) from error
        if not browser.contexts:
            await browser.close()
            raise BrowserError("the computer's host served a browser without its profile")
        session = _new_session(user_id, sandbox, browser.contexts[0], "")
        session.browser = browser

        def disconnected(_browser: Browser) -> None:
            session.closed = True

        browser.on("disconnected", disconnected)
        log.info("browser connected", extra={"user": user_id, "host": sandbox.host})
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
        if session.browser is not None:  # the host closes Chromium when the connection ends
            with contextlib.suppress(Exception):
                await asyncio.wait_for(session.browser.close(), CLOSE_TIMEOUT_S)
            return
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


def playwright_error() -> type[Exception]:
    """Playwright's error class: what a browser action raises (Playwright is loaded by then:
    it loads with the first browser)."""
    from playwright.async_api import Error

    return Error


def _new_session(
    user_id: str, sandbox: Computer, context: BrowserContext, token: str
) -> BrowserSession:
    """A session over a started browser's (persistent) context, marked closed when it is."""
    context.set_default_timeout(15_000)
    context.set_default_navigation_timeout(30_000)
    spare = context.pages[0] if context.pages else None
    session = BrowserSession(user_id, sandbox, context, spare, token)

    def closed(_context: BrowserContext) -> None:
        session.closed = True

    context.on("close", closed)
    return session


def _prepare_runtime_dir(folder: Path) -> None:
    """The root-only folder of the relay socket, the launcher and the placeholder profiles."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    (folder / "relay.sock").unlink(missing_ok=True)
    launcher = folder / "launcher"
    launcher.write_text(f"#!{sys.executable} -IS\n{LAUNCHER_SOURCE}")
    os.chmod(launcher, 0o700)


async def close_idle_browsers_forever(browsers: Browsers, idle_s: float, interval_s: float) -> None:
    """The background sweep that closes browsers unused for `idle_s` (profiles flushed)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await browsers.close_idle(idle_s)
        except Exception:
            log.exception("closing idle browsers failed")
