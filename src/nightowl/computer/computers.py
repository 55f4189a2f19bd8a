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
import re
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nightowl.computer.backends import choose_backend
from nightowl.computer.blob_store import S3SnapshotStore
from nightowl.computer.cgroups import Limits, detect
from nightowl.computer.sandbox import Backend, Network, Sandbox, SandboxError, SandboxSpec
from nightowl.computer.snapshots import PREFIX, HomeTooLarge, archive, restore, snapshot_path
from nightowl.safety.redaction import Redactor
from nightowl.store.computers import (
    claim_placement,
    computer_of,
    placement_of,
    record_awake,
    record_removed,
    record_sleep,
    record_snapshot,
    release_placement,
)
from nightowl.store.database import Database

if TYPE_CHECKING:
    from nightowl.computer.protocol import ComputerPool

log = logging.getLogger(__name__)

# What a computer id (a user id) may hold: it names a folder under the homes.
COMPUTER_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")


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
    # A computer host of a computer tier: its address, recorded as the placement of each
    # computer it runs (None: one server, no placement).
    host_name: str | None = None
    lease_s: float = 15.0
    # Snapshot the home each time a turn lets go of it (a computer tier: a dead host loses
    # only what changed since).
    checkpoint_on_release: bool = False


class PlacedElsewhere(SandboxError):
    """Another live host holds the user's computer; the request belongs there."""

    def __init__(self, host: str) -> None:
        super().__init__(f"the computer is on host {host}")
        self.host = host


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
    # Its lease was taken from a host that died: the home comes back from the last snapshot.
    taken_over: bool = False
    # When this host last claimed its placement (monotonic): claimed again after a third of
    # the lease, so a tool call does not write to the database each time.
    claimed_at: float | None = None


class Computers:
    """The sandboxes of this server, one per user (shared by that user's turns and helpers).

    The async methods hand the work to a thread, so they may be awaited from any event loop.
    """

    def __init__(
        self,
        settings: ComputerSettings,
        database: Database,
        shared: S3SnapshotStore | None = None,
        redactor_for: Callable[[str], Redactor | None] | None = None,
    ) -> None:
        self.settings = settings
        self.database = database
        # Snapshots shared between hosts (None: the snapshot folder is the only store).
        self.shared = shared
        # What a holder must tell the agent: its computer came back from an older snapshot.
        self._notices: dict[str, str] = {}
        self._computers: dict[str, _Computer] = {}
        self._create_lock = threading.Lock()
        self._backend: Backend | None = None
        self._layout = detect()
        # Names this server's cgroups apart from another server's on the same host.
        # Called with the user id before a sandbox sleeps deeply (a browser flushes its profile).
        self.before_sleep: list[Callable[[str], Awaitable[None]]] = []
        # The user's secrets, kept out of the home's snapshot.
        self.redactor_for = redactor_for
        self._instance = hashlib.sha256(str(settings.homes_dir.resolve()).encode()).hexdigest()[:8]

    @property
    def backend(self) -> Backend:
        """The backend in use (chosen once; raises SandboxError when none works here)."""
        if self._backend is None:
            self._backend = choose_backend(self.settings.backend)
        return self._backend

    @property
    def homes_here(self) -> bool:
        """True: the homes are folders on this machine."""
        return True

    def home(self, user_id: str) -> Path:
        """The user's home on the host (what the sandbox sees as /home/agent)."""
        if not COMPUTER_ID.fullmatch(user_id):  # a folder under the homes, never `..`
            raise SandboxError(f"not a computer id: {user_id[:100]!r}")
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
            if self.settings.host_name is not None and (
                computer.claimed_at is None
                or time.monotonic() - computer.claimed_at > self.settings.lease_s / 3
            ):
                self._keep_placement(computer, holder)
            sandbox = computer.sandbox
            if sandbox is not None and not sandbox.alive():
                log.warning("sandbox died; starting it again", extra={"user": user_id})
                sandbox.stop()
                sandbox = computer.sandbox = None
            if sandbox is None:
                try:
                    sandbox = computer.sandbox = self._boot(computer, holder)
                except BaseException:
                    computer.holders.discard(holder)
                    raise
            elif computer.frozen_since is not None:
                sandbox.thaw()
            computer.frozen_since = None
            return sandbox

    def held(self, user_id: str, holder: str) -> Sandbox | None:
        """The user's sandbox when `holder` holds it awake already (no thread, no database)."""
        computer = self._computers.get(user_id)
        if computer is None or holder not in computer.holders or computer.frozen_since:
            return None
        return computer.sandbox

    def _keep_placement(self, computer: _Computer, holder: str) -> None:
        """Claim (or renew) this host's lease on the computer; a computer another live host
        took over is stopped here and the request is sent there."""
        assert self.settings.host_name is not None
        with self.database.write() as session:
            before = claim_placement(
                session, computer.user_id, self.settings.host_name, self.settings.lease_s
            )
        if before is None:
            computer.holders.discard(holder)
            if computer.sandbox is not None:  # this host lost its lease (it was paused)
                computer.sandbox.stop()
                computer.sandbox, computer.frozen_since = None, None
            with self.database.read() as session:
                raise PlacedElsewhere(placement_of(session, computer.user_id).host or "?")
        if before.host not in (None, self.settings.host_name) and computer.sandbox is not None:
            computer.sandbox.stop()  # a stale copy from before another host had it
            computer.sandbox, computer.frozen_since = None, None
        computer.taken_over = before.host not in (None, self.settings.host_name)
        computer.claimed_at = time.monotonic()

    def take_notice(self, holder: str) -> str | None:
        """What the agent must be told about its computer since the last call (once)."""
        return self._notices.pop(holder, None)

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
                    if self.settings.checkpoint_on_release:
                        self._checkpoint(computer)

    def _boot(self, computer: _Computer, holder: str) -> Sandbox:
        backend = self.backend  # raises before the home is touched when none works here
        home = self.home(computer.user_id)
        notice = self._wake_home(computer, home)
        if notice:
            self._notices[holder] = notice
        spec = SandboxSpec(
            name=f"{self._instance}-u{computer.uid}",
            uid=computer.uid,
            home=home,
            limits=Limits(self.settings.memory_bytes, self.settings.cpus, self.settings.pids),
            network=self.settings.network,
            cgroup_layout=self._layout,
        )
        return backend.start(spec)

    def _wake_home(self, computer: _Computer, home: Path) -> str | None:
        """Make sure the home is on disk: restored from its snapshot if it sleeps (or its host
        died), else made. What the agent must be told, when its files went back in time."""
        with self.database.read() as session:
            record = computer_of(session, computer.user_id, self.settings.uid_base)
        notice = None
        home.parent.mkdir(parents=True, exist_ok=True)
        if computer.taken_over:
            computer.taken_over = False
            shutil.rmtree(home, ignore_errors=True)  # a stale copy from an earlier stay here
            when = record.snapshot_at.isoformat(timespec="seconds") if record.snapshot_at else ""
            notice = (
                f"[Your computer's host stopped; your computer was restored from its snapshot "
                f"of {when} UTC: changes to its files after that are lost.]"
                if record.snapshot
                else "[Your computer's host stopped before any snapshot was taken: your "
                "computer starts with an empty home folder.]"
            )
        if record.snapshot and (record.state == "asleep" or notice):
            # What the server put in the home while the computer slept (a channel's received
            # files, ~/inbox/) is kept over the snapshot: the home holds nothing else then.
            arrived = _set_aside(home) if notice is None else None
            self._fetch_snapshot(record.snapshot)
            restore(self.settings.snapshot_dir, record.snapshot, home, computer.uid)
            if arrived is not None:
                _move_into(arrived, home, computer.uid)
            with self.database.write() as session:
                record_awake(session, computer.user_id)
        elif not home.exists():
            home.mkdir(mode=0o700)
        os.chown(home, computer.uid, computer.uid)
        os.chmod(home, 0o700)
        return notice

    def _fetch_snapshot(self, reference: str) -> None:
        """Bring a snapshot from the shared store into the snapshot folder, unless it is here."""
        local = snapshot_path(self.settings.snapshot_dir, reference)
        if self.shared is not None and not local.exists():
            digest = reference.removeprefix(PREFIX)
            self.shared.download(local.name, local, digest)

    def _snapshot(self, computer: _Computer) -> tuple[str, int]:
        """Archive the home (its sandbox stopped or frozen) and share it; reference and size."""
        redactor = self.redactor_for(computer.user_id) if self.redactor_for else None
        home = self.home(computer.user_id)
        reference, size = archive(home, self.settings.snapshot_dir, redactor=redactor)
        if self.shared is not None:
            local = snapshot_path(self.settings.snapshot_dir, reference)
            self.shared.upload(local.name, local)
        return reference, size

    def _checkpoint(self, computer: _Computer) -> None:
        """Snapshot a frozen computer's home and keep it on disk (a computer tier's release)."""
        if not self.home(computer.user_id).exists():
            return
        try:
            reference, size = self._snapshot(computer)
        except (HomeTooLarge, OSError, SandboxError) as error:
            log.warning("no checkpoint", extra={"user": computer.user_id, "why": str(error)})
            return
        with self.database.write() as session:
            record_snapshot(session, computer.user_id, reference, size)

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
        computer.frozen_since, computer.claimed_at = None, None
        home = self.home(computer.user_id)
        if not home.exists():
            return True
        try:
            reference, size = self._snapshot(computer)
        except HomeTooLarge as error:
            log.warning("home stays on disk", extra={"user": computer.user_id, "why": str(error)})
            return False
        with self.database.write() as session:
            record_sleep(session, computer.user_id, reference, size)
            if self.settings.host_name is not None:
                release_placement(session, computer.user_id, self.settings.host_name)
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

    async def remove(self, user_id: str) -> None:
        """The computer is gone for good (an isolated helper's, once the helper ended): its
        sandbox killed, its home deleted (`rmtree` follows no link the computer made), its
        placement and snapshot forgotten (a later acquire would start it fresh)."""
        await asyncio.to_thread(self.remove_now, user_id)

    def remove_now(self, user_id: str) -> None:
        """`remove`, blocking."""
        computer = self._computer(user_id)
        with computer.lock:
            if computer.sandbox is not None:
                computer.sandbox.stop()
            computer.sandbox, computer.frozen_since, computer.claimed_at = None, None, None
            shutil.rmtree(self.home(user_id), ignore_errors=True)
            with self.database.write() as session:
                record_removed(session, user_id)

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


if TYPE_CHECKING:
    _IS_A_POOL: type[ComputerPool] = Computers  # mypy checks that it meets the protocol


def _set_aside(home: Path) -> Path | None:
    """Move a sleeping computer's home folder (only what arrived while it slept) aside."""
    if not home.exists():
        return None
    aside = home.with_name(f".{home.name}.arrived")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(home, aside)
    return aside


def _move_into(arrived: Path, home: Path, uid: int) -> None:
    """Put the files that arrived while the computer slept into its restored home, owned by
    its user (a link is dropped: the server writes none)."""
    for folder, _, names in os.walk(arrived):
        relative = Path(folder).relative_to(arrived)
        for name in names:
            source = Path(folder) / name
            if source.is_symlink() or not source.is_file():
                continue
            target = home / relative / name
            for parent in reversed(target.relative_to(home).parents[:-1]):
                made = home / parent
                if made.is_symlink():
                    break  # the snapshot has a link there: the file stays out
                if not made.exists():
                    made.mkdir(mode=0o755)
                    os.chown(made, uid, uid)
            else:
                if not target.parent.is_symlink() and not target.is_symlink():
                    os.replace(source, target)
                    os.chown(target, uid, uid)
    shutil.rmtree(arrived, ignore_errors=True)


async def sleep_idle_forever(computers: Computers, interval_s: float) -> None:
    """The background sweep that puts idle sandboxes into deep sleep."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await computers.sleep_idle()
        except Exception:
            log.exception("putting idle sandboxes to sleep failed")
