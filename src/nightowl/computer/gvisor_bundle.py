"""The OCI bundle gVisor runs a sandbox from: an empty root with mount points, the data files
(`/etc/passwd`, `/etc/group`, `/etc/resolv.conf`) and `config.json` (user, capabilities,
mounts, rlimits, namespaces)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nightowl.computer.bubblewrap import MERGED_DIRS, SYSTEM_DIRS, SYSTEM_PYTHON
from nightowl.computer.sandbox import (
    HOME_INSIDE,
    PATH_INSIDE,
    SUPERVISOR_SOURCE,
    SandboxSpec,
    passwd_entries,
)

TMPFS_DIRS = ("/dev/shm", "/tmp", "/run", "/var/tmp")
PRELUDE = """
import os, threading
supervisor = os.fork()
if supervisor:
    os.close(0)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == supervisor:
            os._exit(os.waitstatus_to_exitcode(status) % 256)
try:
    os.close(os.pidfd_open(os.getpid()))
except OSError:
    def _pidfd_open(pid, flags=0):
        done, signal = os.pipe()
        def watch():
            try:
                os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                pass
            finally:
                os.close(signal)
        threading.Thread(target=watch, daemon=True).start()
        return done
    os.pidfd_open = _pidfd_open
"""


def supervisor_source() -> str:
    """The `-c` program: the prelude, then the supervisor itself as `__main__`."""
    run = (
        f"exec(compile({SUPERVISOR_SOURCE!r}, 'supervisor.py', 'exec'), {{'__name__': '__main__'}})"
    )
    return PRELUDE + run + "\n"


def write_bundle(bundle: Path, spec: SandboxSpec, netns: str | None) -> None:
    """The OCI bundle: an empty root with the mount points, the data files, config.json."""
    root = bundle / "rootfs"
    for folder in ("/proc", "/dev", *TMPFS_DIRS[1:], HOME_INSIDE, *SYSTEM_DIRS):
        (root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
    binds: list[tuple[str, str]] = [(folder, folder) for folder in SYSTEM_DIRS]
    for folder in MERGED_DIRS:
        if os.path.islink(folder):
            os.symlink(os.readlink(folder), root / folder.lstrip("/"))
        elif os.path.isdir(folder):
            (root / folder.lstrip("/")).mkdir()
            binds.append((folder, folder))
    passwd, group = passwd_entries(spec.uid)
    data = {"/etc/passwd": passwd, "/etc/group": group}
    if spec.network == "egress":
        data["/etc/resolv.conf"] = b"nameserver 10.0.2.3\n"
    for target, content in data.items():
        source = bundle / target.rsplit("/", 1)[1]
        source.write_bytes(content)
        binds.append((str(source), target))
    config = oci_config(spec, binds, netns)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))


def oci_config(
    spec: SandboxSpec, binds: list[tuple[str, str]], netns: str | None
) -> dict[str, Any]:
    """config.json for the sandbox: user, capabilities, mounts, rlimits, namespaces."""
    tmpfs = ["nosuid", "nodev", "mode=1777"]
    pts = ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]
    mounts = [
        _mount("/proc", "proc", "proc", []),
        _mount("/dev", "tmpfs", "tmpfs", ["nosuid"]),
        _mount("/dev/pts", "devpts", "devpts", pts),
        *(_mount(target, "tmpfs", "tmpfs", tmpfs) for target in TMPFS_DIRS),
        *(_mount(target, "bind", source, ["rbind", "ro"]) for source, target in binds),
        _mount(HOME_INSIDE, "bind", str(spec.home), ["rbind", "rw"]),
    ]
    rlimits = [
        {"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 65536},
        {"type": "RLIMIT_NPROC", "hard": spec.limits.pids, "soft": spec.limits.pids},
    ]
    if spec.cgroup_layout is None:
        # No cgroup: per-process address space. (bubblewrap caps RLIMIT_DATA to spare browsers'
        # reservations, but gVisor counts only brk against it, not mmap.)
        memory = spec.limits.memory_bytes
        rlimits.append({"type": "RLIMIT_AS", "hard": memory, "soft": memory})
    network: dict[str, str] = {"type": "network"}
    if netns is not None:
        network["path"] = netns
    env = [f"HOME={HOME_INSIDE}", "USER=agent", f"PATH={PATH_INSIDE}", "LANG=C.UTF-8"]
    caps = ("bounding", "effective", "inheritable", "permitted", "ambient")
    return {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "nightowl",
        "process": {
            "terminal": False,
            "user": {"uid": spec.uid, "gid": spec.uid, "additionalGids": []},
            "args": [SYSTEM_PYTHON, "-I", "-S", "-c", supervisor_source(), "0"],
            "env": [*env, "TMPDIR=/tmp"],
            "cwd": HOME_INSIDE,
            "capabilities": {name: [] for name in caps},  # none at all
            "rlimits": rlimits,
            "noNewPrivileges": True,
        },
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": kind} for kind in ("pid", "ipc", "uts", "mount")] + [network],
        },
    }


def _mount(target: str, kind: str, source: str, options: list[str]) -> dict[str, Any]:
    return {"destination": target, "type": kind, "source": source, "options": options}
