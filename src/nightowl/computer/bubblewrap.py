"""The default backend: bubblewrap namespaces under an unprivileged host uid per user.

Root never runs `bwrap --unshare-user` itself (that maps to real root outside): `setpriv`
first becomes the user's own uid with no capabilities and no new privileges, then bwrap makes
user, PID, IPC, UTS, mount and (always) network namespaces, a read-only system and a
writable home, and drops every capability inside.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from nightowl.computer.cgroups import Cgroup
from nightowl.computer.network import firewall_rules, start_egress
from nightowl.computer.sandbox import (
    HOME_INSIDE,
    PATH_INSIDE,
    SUPERVISOR_SOURCE,
    Sandbox,
    SandboxError,
    SandboxSpec,
    data_fd,
    passwd_entries,
    wait_until_ready,
)

SYSTEM_DIRS = ("/usr", "/etc")
MERGED_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_PYTHON = "/usr/bin/python3"
READY_TIMEOUT_S = 10.0
# Where root binds the home, inside the sandbox's private mount namespace, for bwrap to find.
HOME_STAGE = "/mnt"


class BubblewrapBackend:
    """Namespaces via bubblewrap; limits via cgroups or prlimit."""

    name = "bubblewrap"

    def problems(self) -> list[str]:
        """Why this backend cannot work here (empty when it can)."""
        found = []
        for tool, package in (("bwrap", "bubblewrap"), ("setpriv", "util-linux")):
            if shutil.which(tool) is None:
                found.append(f"{tool} is missing (apt-get install {package})")
        if not Path(SYSTEM_PYTHON).exists():
            found.append(f"{SYSTEM_PYTHON} is missing (apt-get install python3-minimal)")
        if os.geteuid() != 0:
            found.append("the server must run as root to give each user's sandbox its own uid")
        max_ns = Path("/proc/sys/user/max_user_namespaces")
        if max_ns.exists() and max_ns.read_text().strip() == "0":
            found.append("user namespaces are disabled (sysctl user.max_user_namespaces=0)")
        return found

    def start(self, spec: SandboxSpec) -> Sandbox:
        """Start the sandbox and wait until its supervisor answers."""
        cgroup = None
        if spec.cgroup_layout is not None:
            cgroup = Cgroup(spec.name, spec.cgroup_layout)
            cgroup.create(spec.limits)
        passwd, group = passwd_entries(spec.uid)
        data = {"/etc/passwd": data_fd(passwd), "/etc/group": data_fd(group)}
        if spec.network == "egress":
            data["/etc/resolv.conf"] = data_fd(b"nameserver 10.0.2.3\n")
        ours, theirs = socket.socketpair()
        info_read, info_write = os.pipe()
        ready_read, ready_write = os.pipe()
        firewall = data_fd(firewall_rules()) if spec.network == "egress" else None
        argv = _as_root_first(
            spec, cgroup, self._argv(spec, data, theirs.fileno(), info_write), firewall
        )
        passed = (*data.values(), theirs.fileno(), info_write)
        if firewall is not None:
            passed = (*passed, firewall)
        errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed below; says why bwrap refused)
        try:
            process = subprocess.Popen(
                argv,
                pass_fds=passed,
                stdin=subprocess.DEVNULL,
                stdout=ready_write,
                stderr=errors,
                start_new_session=True,
            )
        finally:
            for fd in (*passed, ready_write):
                os.close(fd)
            theirs.detach()
        sandbox = Sandbox(spec, self.name, process, ours, cgroup)
        try:
            _read_info(info_read)  # bwrap has made the namespaces
            wait_until_ready(ready_read, process, errors, READY_TIMEOUT_S, "the sandbox")
            if spec.network == "egress":
                sandbox.helpers.append(start_egress(process.pid))
        except BaseException:
            sandbox.stop()
            raise
        finally:
            os.close(info_read)
            os.close(ready_read)
            errors.close()
        return sandbox

    def _argv(self, spec: SandboxSpec, data: dict[str, int], control: int, info: int) -> list[str]:
        uid = str(spec.uid)
        argv = [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
        ]
        if spec.cgroup_layout is None:
            argv = ["prlimit", *_prlimits(spec), "--", *argv]
        argv += [
            "--",
            "bwrap",
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            # No nested user namespaces: they would hand the agent capabilities (inside them)
            # over kernel code that privilege escalations like to target.
            "--disable-userns",
            "--assert-userns-disabled",
            "--die-with-parent",
            "--new-session",
            "--uid",
            uid,
            "--gid",
            uid,
            "--hostname",
            "nightowl",
            "--info-fd",
            str(info),
        ]
        if spec.network == "none":
            argv.append("--unshare-net")
        for folder in SYSTEM_DIRS:
            argv += ["--ro-bind", folder, folder]
        for folder in MERGED_DIRS:
            if os.path.islink(folder):
                argv += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                argv += ["--ro-bind", folder, folder]
        for target, fd in data.items():
            argv += ["--ro-bind-data", str(fd), target]
        argv += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/run",
            "--dir",
            "/var/tmp",
            "--bind",
            HOME_STAGE,
            HOME_INSIDE,
            "--remount-ro",
            "/",  # the sandbox's own root folder too: only home, /tmp and /run are writable
            "--chdir",
            HOME_INSIDE,
            "--clearenv",
            "--setenv",
            "HOME",
            HOME_INSIDE,
            "--setenv",
            "USER",
            "agent",
            "--setenv",
            "PATH",
            PATH_INSIDE,
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "TMPDIR",
            "/tmp",
            "--cap-drop",
            "ALL",
            "--",
            SYSTEM_PYTHON,
            "-I",
            "-S",
            "-c",
            SUPERVISOR_SOURCE,
            str(control),
        ]
        return argv


def _as_root_first(
    spec: SandboxSpec, cgroup: Cgroup | None, argv: list[str], firewall: int | None
) -> list[str]:
    """What root does before it drops privileges: join the cgroup, make a private mount
    namespace where the home is bound at a path the sandbox's uid can reach (the data dir's
    parents may be closed to it), and for egress a network namespace the host owns (the
    user-mode stack joins it; the sandbox has no capability to reconfigure it)."""
    joins = "".join(f'echo $$ > "{path}" && ' for path in cgroup.procs_files()) if cgroup else ""
    namespaces = ["--mount", "--propagation", "private"]
    stage = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    if spec.network == "egress":
        namespaces.append("--net")
        # The firewall goes up before anything of the sandbox runs (its rules in a memfd).
        stage = 'mount --bind "$1" "$2" && nft -f "/proc/self/fd/$3" && shift 3 && exec "$@"'
    return [
        "/bin/sh",
        "-c",
        f'{joins}exec "$@"',
        "sh",
        "unshare",
        *namespaces,
        "--",
        "/bin/sh",
        "-c",
        stage,
        "sh",
        str(spec.home),
        HOME_STAGE,
        *([str(firewall)] if firewall is not None else []),
        *argv,
    ]


def _prlimits(spec: SandboxSpec) -> list[str]:
    # Without cgroups: per-process data size (not address space: browsers reserve far more
    # than they use) and processes of this uid.
    return [
        f"--data={spec.limits.memory_bytes}",
        f"--nproc={spec.limits.pids}",
    ]


def _read_info(fd: int) -> int:
    """bwrap's info JSON: the pid (on the host) of the sandbox's first process."""
    data = b""
    while b"}" not in data:
        ready, _, _ = select.select([fd], [], [], READY_TIMEOUT_S)
        if not ready:
            raise SandboxError("bubblewrap did not start the sandbox in time")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise SandboxError("bubblewrap stopped before the sandbox started")
        data += chunk
    return int(json.loads(data[: data.index(b"}") + 1])["child-pid"])
