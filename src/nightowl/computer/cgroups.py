"""Resource limits and freezing for a sandbox through cgroups (v2, or v1 controllers).

The layout is detected at run time: a unified v2 hierarchy with the memory and pids
controllers, or v1 hierarchies for memory, cpu, pids and freezer (hybrid machines have both;
v1 wins where its controllers are writable and v2's are not). Without either, the caller falls
back to `prlimit` and cannot freeze.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from nightowl.computer.errors import SandboxError

ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "pids", "freezer")


class CgroupError(SandboxError):
    """A cgroup could not be made, limited, frozen or cleared."""


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use."""

    memory_bytes: int
    cpus: float
    pids: int


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def detect(root: Path = ROOT) -> str | None:
    """'v2', 'v1' or None, for the hierarchy this process can create sandboxes' groups in."""
    controllers = root / "cgroup.controllers"
    if controllers.is_file() and _writable(root):
        available = set(controllers.read_text().split())
        if {"memory", "pids", "cpu"} <= available:
            return "v2"
    if all(_writable(root / name) for name in V1_CONTROLLERS):
        return "v1"
    return None


class Cgroup:
    """One sandbox's group: limits, membership, freeze and thaw, kill everything in it."""

    def __init__(self, name: str, layout: str, root: Path = ROOT) -> None:
        self.name = name
        self.layout = layout
        if layout == "v2":
            self._dirs = {"all": root / "nightowl" / name}
        else:
            self._dirs = {c: root / c / "nightowl" / name for c in V1_CONTROLLERS}

    def create(self, limits: Limits) -> None:
        """Make the group (again) and apply the limits. A group left by a crashed server is
        cleared first: its processes killed, and thawed (a frozen group would freeze the
        new sandbox's first process the moment it joined)."""
        if any(folder.exists() for folder in self._dirs.values()):
            with contextlib.suppress(OSError, CgroupError):
                self.kill_all()
            with contextlib.suppress(OSError):
                self.thaw()
        try:
            if self.layout == "v2":
                parent = self._dirs["all"].parent
                parent.mkdir(exist_ok=True)
                (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
                self._dirs["all"].mkdir(exist_ok=True)
                self._set("all", "memory.max", str(limits.memory_bytes))
                self._set("all", "memory.swap.max", "0", optional=True)
                self._set("all", "pids.max", str(limits.pids))
                self._set("all", "cpu.max", f"{int(limits.cpus * 100_000)} 100000")
            else:
                for folder in self._dirs.values():
                    folder.mkdir(parents=True, exist_ok=True)
                self._set("memory", "memory.limit_in_bytes", str(limits.memory_bytes))
                self._set("memory", "memory.memsw.limit_in_bytes", str(limits.memory_bytes), True)
                self._set("pids", "pids.max", str(limits.pids))
                self._set("cpu", "cpu.cfs_period_us", "100000")
                self._set("cpu", "cpu.cfs_quota_us", str(int(limits.cpus * 100_000)))
        except OSError as error:
            raise CgroupError(f"cannot set up cgroup {self.name}: {error}") from error

    def _set(self, key: str, file: str, value: str, optional: bool = False) -> None:
        try:
            (self._dirs[key] / file).write_text(value)
        except OSError:
            if not optional:
                raise

    def procs_files(self) -> list[Path]:
        """The files a process writes its pid to, to join the group (all controllers)."""
        return [folder / "cgroup.procs" for folder in self._dirs.values()]

    def pids(self) -> list[int]:
        """The processes in the group now."""
        folder = self._dirs["all" if self.layout == "v2" else "pids"]
        try:
            return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def freeze(self, wait_s: float = 1.0) -> None:
        """Stop every process in the group where it stands (no CPU, memory kept); returns
        once the kernel reports the group frozen (v1 passes through FREEZING)."""
        self._freezer("1" if self.layout == "v2" else "FROZEN")
        deadline = time.monotonic() + wait_s
        while not self.frozen() and time.monotonic() < deadline:
            time.sleep(0.001)

    def thaw(self) -> None:
        """Let the group's processes run again."""
        self._freezer("0" if self.layout == "v2" else "THAWED")

    def frozen(self) -> bool:
        """Whether the group is frozen now."""
        if self.layout == "v2":
            return "frozen 1" in (self._dirs["all"] / "cgroup.events").read_text()
        return (self._dirs["freezer"] / "freezer.state").read_text().strip() == "FROZEN"

    def _freezer(self, state: str) -> None:
        if self.layout == "v2":
            (self._dirs["all"] / "cgroup.freeze").write_text(state)
        else:
            (self._dirs["freezer"] / "freezer.state").write_text(state)

    def pids_refused(self) -> int:
        """How many forks the process limit refused so far."""
        folder = self._dirs["all" if self.layout == "v2" else "pids"]
        for line in (folder / "pids.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
        return 0

    def memory_events(self) -> dict[str, int]:
        """How often the memory limit was hit and the OOM killer ran."""
        if self.layout == "v2":
            text = (self._dirs["all"] / "memory.events").read_text()
            return {k: int(v) for k, v in (line.split() for line in text.splitlines())}
        folder = self._dirs["memory"]
        return {
            "max": int((folder / "memory.failcnt").read_text()),
            "oom_kill": _oom_kills(folder / "memory.oom_control"),
        }

    def kill_all(self, timeout_s: float = 2.0) -> None:
        """SIGKILL every process in the group (frozen first, so none can fork meanwhile)."""
        if self.layout == "v2":
            kill = self._dirs["all"] / "cgroup.kill"
            if kill.exists():
                kill.write_text("1")
                self._wait_empty(timeout_s)
                return
        with contextlib.suppress(OSError):
            self.freeze()
        for pid in self.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.thaw()  # killed processes only die once thawed
        self._wait_empty(timeout_s)

    def _wait_empty(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.pids():
            if time.monotonic() > deadline:
                raise CgroupError(f"processes of {self.name} did not die: {self.pids()}")
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def remove(self) -> None:
        """Delete the (empty) group."""
        for folder in self._dirs.values():
            with contextlib.suppress(OSError):
                folder.rmdir()


def _oom_kills(path: Path) -> int:
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0
