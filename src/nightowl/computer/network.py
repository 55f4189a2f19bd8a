"""Egress-only networking for a sandbox: slirp4netns (or pasta) in user mode.

Every sandbox has its own network namespace; with the policy `none` it holds only its own
loopback. With `egress`, a user-mode network stack (slirp4netns, confined) connects
out through the host's sockets; `--disable-host-loopback` keeps the host's 127.0.0.1 services
(PostgreSQL, Redis, the server itself) out of reach.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess

from nightowl.computer.sandbox import SandboxError

READY_TIMEOUT_S = 5.0


def egress_problems() -> list[str]:
    """Why egress networking cannot work here (empty when it can)."""
    if shutil.which("slirp4netns") is None:
        return ["slirp4netns is missing (apt-get install slirp4netns)"]
    return []


def start_egress(sandbox_pid: int) -> subprocess.Popen[bytes]:
    """Give the sandbox's network namespace (by the host pid of a process in it) a route out.

    slirp4netns runs in its own mount namespace with only CAP_NET_BIND_SERVICE and a seccomp
    filter (`--enable-sandbox --enable-seccomp`).
    """
    ready_read, ready_write = os.pipe()
    argv = [
        "slirp4netns",
        "--configure",
        "--mtu=65520",
        "--disable-host-loopback",
        "--enable-sandbox",
        "--enable-seccomp",
        f"--ready-fd={ready_write}",
        str(sandbox_pid),
        "tap0",
    ]
    try:
        process = subprocess.Popen(
            argv,
            pass_fds=(ready_write,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    finally:
        os.close(ready_write)
    try:
        ready, _, _ = select.select([ready_read], [], [], READY_TIMEOUT_S)
        if not ready or os.read(ready_read, 1) != b"1":
            process.kill()
            _, errors = process.communicate(timeout=5)
            raise SandboxError(
                f"the sandbox's network did not come up: {errors.decode(errors='replace')[:500]}"
            )
    finally:
        os.close(ready_read)
    return process
