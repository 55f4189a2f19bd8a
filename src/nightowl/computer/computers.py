"""Every user's computer and its life: booted when a tool needs it, awake through the turn,
frozen when the turn ends, archived as a snapshot after a longer idle time, restored on the
next tool call, and rebuildable from its home or snapshot at any time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from nightowl.computer.backends import choose_backend
from nightowl.computer.cgroups import Limits, detect
from nightowl.computer.sandbox import Backend, Network, Sandbox, SandboxError, SandboxSpec
from nightowl.computer.snapshots import HomeTooLarge, archive, restore
from nightowl.safety.redaction import Redactor
from nightowl.store.computers import computer_of, record_awake, record_sleep
from nightowl.store.database import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ComputerSettings:
    """How sandboxes are made and when they sleep."""

    homes_dir: Path
    snapshot_dir: Path
    backend: str = "auto"
    network: Network = "egress"
    memory_bytes: int = 2 * 1024**3
    cpus: float = 1.0
    pids: int = 512
    uid_base: int = 3_000_000
    idle_sleep_s: float = 900.0


@dataclass
class _Computer:
    """One user's sandbox as this process holds it."""

    user_id: str
    uid: int
    # A thread lock: turns, the API and the sleep sweep may run on different event loops.
    lock: threading.Lock = field(default_factory=threading.Lock)
    sandbox: Sandbox | None = None
    holders: set[str] = field(default_factory=set)
    frozen_since: float | None = None


class Computers:
    """The sandboxes of this server, one per user (shared by that user's turns and helpers).

    The async methods hand the work to a thread, so they may be awaited from any event loop.
    """

    def __init__(self, settings: ComputerSettings, database: Database) -> None:
        self.settings = settings
        self.database = database
        self._computers: dict[str, _Computer] = {}
        self._create_lock = threading.Lock()
        self._backend: Backend | None = None
        self._layout = detect()
        # Names this server's cgroups apart from another server's on the same host.
        # Called with the user id before a sandbox sleeps deeply (a browser flushes its profile).
        self.before_sleep: list[Callable[[str], Awaitable[None]]] = []
        # The user's secrets, kept out of the home's snapshot (set by the composition root).
        self.redactor_for: Callable[[str], Redactor] | None = None
        self._instance = hashlib.sha256(str(settings.homes_dir.resolve()).encode()).hexdigest()[:8]

    @property
    def backend(self) -> Backend:
        """The backend in use (chosen once; raises SandboxError when none works here)."""
        if self._backend is None:
            self._backend = choose_backend(self.settings.backend)
        return self._backend

    def home(self, user_id: str) -> Path:
        """The user's home on the host (what the sandbox sees as /home/agent)."""
        return self.settings.homes_dir / user_id

    def _computer(self, user_id: str) -> _Computer:
        with self._create_lock:
            found = self._computers.get(user_id)
            if found is None:
                with self.database.write() as session:
                    uid = computer_of(session, user_id, self.settings.uid_base).uid
                found = self._computers[user_id] = _Computer(user_id, uid)
            return found

    async def acquire(self, user_id: str, holder: str) -> Sandbox:
        """The user's sandbox, running, held awake by `holder` (a turn) until `release`."""
        return await asyncio.to_thread(self.acquire_now, user_id, holder)

    def acquire_now(self, user_id: str, holder: str) -> Sandbox:
        """`acquire`, blocking."""
        computer = self._computer(user_id)
        with computer.lock:
            computer.holders.add(holder)
            sandbox = computer.sandbox
            if sandbox is not None and not sandbox.alive():
                log.warning("sandbox died; starting it again", extra={"user": user_id})
                sandbox.stop()
                sandbox = computer.sandbox = None
            if sandbox is None:
                try:
                    sandbox = computer.sandbox = self._boot(computer)
                except BaseException:
                    computer.holders.discard(holder)
                    raise
            elif computer.frozen_since is not None:
                sandbox.thaw()
            computer.frozen_since = None
            return sandbox

    async def release(self, holder: str) -> None:
        """`holder` is done (its turn ended): freeze each sandbox no one holds any more."""
        if any(holder in c.holders for c in list(self._computers.values())):
            await asyncio.to_thread(self.release_now, holder)

    def release_now(self, holder: str) -> None:
        """`release`, blocking."""
        for computer in list(self._computers.values()):
            with computer.lock:
                if holder not in computer.holders:
                    continue
                computer.holders.discard(holder)
                if not computer.holders and computer.sandbox is not None:
                    with contextlib.suppress(OSError):
                        computer.sandbox.freeze()
                    computer.frozen_since = time.monotonic()

    def _boot(self, computer: _Computer) -> Sandbox:
        home = self.home(computer.user_id)
        self._wake_home(computer, home)
        spec = SandboxSpec(
            name=f"{self._instance}-u{computer.uid}",
            uid=computer.uid,
            home=home,
            limits=Limits(self.settings.memory_bytes, self.settings.cpus, self.settings.pids),
            network=self.settings.network,
            cgroup_layout=self._layout,
        )
        return self.backend.start(spec)

    def _wake_home(self, computer: _Computer, home: Path) -> None:
        """Make sure the home is on disk: restored from its snapshot if it sleeps, else made."""
        with self.database.read() as session:
            record = computer_of(session, computer.user_id, self.settings.uid_base)
        if record.state == "asleep" and record.snapshot:
            restore(self.settings.snapshot_dir, record.snapshot, home, computer.uid)
            with self.database.write() as session:
                record_awake(session, computer.user_id)
        elif not home.exists():
            home.parent.mkdir(parents=True, exist_ok=True)
            home.mkdir(mode=0o700)
        os.chown(home, computer.uid, computer.uid)
        os.chmod(home, 0o700)

    async def deep_sleep(self, user_id: str) -> bool:
        """Stop the user's sandbox and keep its home only as a snapshot; False if held."""
        computer = self._computers.get(user_id)
        if computer is not None and computer.holders:
            return False  # never during a turn
        for hook in self.before_sleep:
            await hook(user_id)  # outside the lock: a hook may itself use the sandbox
        return await asyncio.to_thread(self.deep_sleep_now, user_id)

    def deep_sleep_now(self, user_id: str) -> bool:
        """`deep_sleep`, blocking."""
        computer = self._computer(user_id)
        with computer.lock:
            if computer.holders:
                return False  # never during a turn
            return self._archive_home(computer)

    def _archive_home(self, computer: _Computer) -> bool:
        if computer.sandbox is not None:
            computer.sandbox.stop()
            computer.sandbox = None
        computer.frozen_since = None
        home = self.home(computer.user_id)
        if not home.exists():
            return True
        try:
            redactor = self.redactor_for(computer.user_id) if self.redactor_for else None
            reference, size = archive(home, self.settings.snapshot_dir, redactor=redactor)
        except HomeTooLarge as error:
            log.warning("home stays on disk", extra={"user": computer.user_id, "why": str(error)})
            return False
        with self.database.write() as session:
            record_sleep(session, computer.user_id, reference, size)
        shutil.rmtree(home)
        log.info("sandbox asleep", extra={"user": computer.user_id, "snapshot_bytes": size})
        return True

    async def sleep_idle(self) -> int:
        """Deep-sleep every sandbox frozen for longer than the idle time; how many slept."""
        now, slept = time.monotonic(), 0
        for computer in list(self._computers.values()):
            since = computer.frozen_since
            if since is not None and now - since >= self.settings.idle_sleep_s:
                slept += await self.deep_sleep(computer.user_id)
        return slept

    async def destroy(self, user_id: str) -> None:
        """Kill the sandbox outright; the next tool call builds a fresh one from its home
        (or, when it sleeps, from its last snapshot)."""
        await asyncio.to_thread(self.destroy_now, user_id)

    def destroy_now(self, user_id: str) -> None:
        """`destroy`, blocking."""
        computer = self._computer(user_id)
        with computer.lock:
            if computer.sandbox is not None:
                computer.sandbox.stop()
            computer.sandbox, computer.frozen_since = None, None

    def state(self, user_id: str) -> str:
        """'off', 'running' or 'frozen', as this process sees it."""
        computer = self._computers.get(user_id)
        if computer is None or computer.sandbox is None:
            return "off"
        return "frozen" if computer.frozen_since is not None else "running"

    def close(self) -> None:
        """Stop every sandbox (the homes stay on disk)."""
        for computer in list(self._computers.values()):
            with computer.lock:
                if computer.sandbox is not None:
                    with contextlib.suppress(SandboxError, OSError):
                        computer.sandbox.stop()
                    computer.sandbox = None


async def sleep_idle_forever(computers: Computers, interval_s: float) -> None:
    """The background sweep that puts idle sandboxes into deep sleep."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await computers.sleep_idle()
        except Exception:
            log.exception("putting idle sandboxes to sleep failed")
