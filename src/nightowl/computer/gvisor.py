"""The gVisor backend: the sandbox runs on gVisor's user-space kernel (`runsc`, platform
ptrace), so what a process inside can reach of the host kernel is gVisor's sentry, not Linux.

The contract is bubblewrap's: the supervisor runs as the user's own uid with no capabilities
(OCI `process.user`, empty capability sets), the system is read-only (/usr and /etc bound
read-only into an empty read-only root, /bin, /lib... as the same symlinks or read-only binds),
the home is bound writable at /home/agent, and /tmp, /run and /var/tmp are private tmpfs.

The control socket: runsc 20221219 has no `--preserve-fds`, but it hands its own stdin, stdout
and stderr to the container as host-backed descriptors, and gVisor's host-backed unix sockets
do receive SCM_RIGHTS (passed descriptors are imported as host files, sockets and pipes). So
runsc's stdin is the control socket (the supervisor gets `0` as its descriptor) and `ready`
comes back on runsc's stdout, as with bubblewrap. A prelude (gvisor_bundle.PRELUDE) makes
PID 1 an init that reaps orphans and stands in for `pidfd_open`, which gVisor lacks.

Limits: with a cgroup layout, runsc runs with `--ignore-cgroups` inside the sandbox's own group
(joined before exec, as bubblewrap does), which holds gVisor's sentry, gofer and ptrace stubs:
the freezer and `kill_all` cover everything. Inside, gVisor enforces RLIMIT_NPROC (and without
cgroups RLIMIT_AS, freezing through `runsc pause`). Going over the memory limit makes the host
kill the sentry, that is the whole sandbox (the next acquire starts it again), where
bubblewrap loses only the greedy process.

Networking: `none` is `--network=none` (loopback only). `egress` is gVisor's own netstack
(`--network=sandbox`) in a network namespace root makes and slirp4netns (`network.py`)
connects out, with the host's loopback out of reach. gVisor's netstack writes whole frames
through a packet socket on that namespace's device, past the `inet` hooks bubblewrap's rules
sit on, so the same refusals go on the device itself (`network.guard_device`, a netdev egress
chain) before runsc starts. runsc 20221219 refuses it as "the root
network namespace" because /proc/sys/net/core/rmem_default exists there, which newer kernels
show in every namespace; runsc is therefore started inside that namespace with the directory
hidden by an empty tmpfs in a private mount namespace.

Known gap of runsc 20221219: its statx and fstatat reject AT_NO_AUTOMOUNT (EINVAL), which
coreutils 9 always passes, so `ls -l`, `ls PATH` and `stat` fail inside ("Invalid argument");
plain `ls`, find, cp, tar and Python work.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from nightowl.computer.bubblewrap import SYSTEM_PYTHON
from nightowl.computer.cgroups import Cgroup, Limits
from nightowl.computer.gvisor_bundle import write_bundle
from nightowl.computer.network import guard_device, start_egress
from nightowl.computer.sandbox import (
    Sandbox,
    SandboxError,
    SandboxSpec,
    wait_until_ready,
)

STATE_DIR = Path("/run/nightowl-gvisor")  # root-only: runsc's state and the bundles
PLATFORM = "ptrace"
READY_TIMEOUT_S = 20.0
RUNSC_TIMEOUT_S = 10.0
STOP_GRACE_S = 2.0
PROBE_TIMEOUT_S = 10.0
# The host cgroup holds gVisor itself too: its sentry, gofer and (ptrace platform) stub
# processes, with up to a host thread per sandbox thread in each stub, so a sandbox with N
# processes can use thousands of host tasks. A failed fork on the host panics the whole sentry,
# so pids.max on the host is only a backstop far above N; gVisor holds the sandbox's own
# processes to N inside (RLIMIT_NPROC). Memory gets room for the sentry and those threads.
HOST_TASKS_PER_PROCESS = 64
GVISOR_TASKS = 4096
GVISOR_MEMORY = 128 * 1024 * 1024
STATX_NOTE = (
    "`ls -l`, `ls PATH` and `stat` fail inside (this runsc rejects statx with AT_NO_AUTOMOUNT, "
    "which coreutils 9 passes); a newer runsc may fix it"
)
_probes: dict[str, Probe] = {}  # by runsc path, once per process

# Runs before the supervisor. The container's first process is PID 1, which must reap orphans
# (bwrap's init does it for bubblewrap): it forks and, as the parent, reaps every child until
# the supervisor ends. gVisor has no pidfd_open (ENOSYS): the supervisor gets a stand-in, a pipe
# closed once waitid(WNOWAIT) sees the child end (left unreaped for the supervisor's wait).


@dataclass
class GvisorSandbox(Sandbox):
    """A sandbox on gVisor: freezing without cgroups, and a stop that clears runsc's state."""

    runsc: list[str] = field(default_factory=list)  # runsc with its global flags
    container: str = ""
    bundle: Path | None = None
    paused: bool = False

    def _runsc(self, *args: str) -> None:
        _run_runsc([*self.runsc, *args])

    def freeze(self) -> None:
        """Freeze through the cgroup when there is one, else `runsc pause`."""
        if self.cgroup is not None:
            self.cgroup.freeze()
        elif not self.paused:
            self._runsc("pause", self.container)
            self.paused = True

    def thaw(self) -> None:
        """Thaw through the cgroup, or `runsc resume`."""
        if self.cgroup is not None:
            self.cgroup.thaw()
        elif self.paused:
            self._runsc("resume", self.container)
            self.paused = False

    def stop(self) -> None:
        """End the sandbox and leave nothing running: the supervisor ends when its control
        socket closes and runsc then clears its own state; what is left is killed."""
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(OSError, SandboxError):
            self.thaw()  # a frozen sandbox cannot end by itself
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_S)
        if self.process.poll() is None:
            with contextlib.suppress(SandboxError):
                self._runsc("delete", "--force", self.container)
        super().stop()  # the cgroup's processes, runsc, the network helpers
        if self.bundle is not None:
            shutil.rmtree(self.bundle, ignore_errors=True)


class GvisorBackend:
    """gVisor's runsc (ptrace platform); limits via cgroups or rlimits."""

    name = "gvisor"

    def __init__(self, state_dir: Path = STATE_DIR) -> None:
        self.state_dir = state_dir

    def problems(self) -> list[str]:
        """Why this backend cannot work here (empty when it can); starts one tiny sandbox
        the first time in a process (with a timeout) to see that runsc really runs."""
        found = []
        runsc = shutil.which("runsc")
        if runsc is None:
            found.append("runsc is missing (apt-get install runsc, or gVisor's release binary)")
        if not Path(SYSTEM_PYTHON).exists():
            found.append(f"{SYSTEM_PYTHON} is missing (apt-get install python3-minimal)")
        if os.geteuid() != 0:
            found.append(
                "the server must run as root: runsc needs it to give each user's "
                "sandbox its own uid"
            )
        if runsc is not None and not found:
            failure = self._probe(runsc).failure
            if failure is not None:
                found.append(failure)
        return found

    def notes(self) -> list[str]:
        """What works badly with this runsc (when it works at all)."""
        runsc = shutil.which("runsc")
        return [] if runsc is None or self.problems() else list(self._probe(runsc).notes)

    def _probe(self, runsc: str) -> Probe:
        if runsc not in _probes:
            _probes[runsc] = probe(runsc)
        return _probes[runsc]

    def start(self, spec: SandboxSpec) -> Sandbox:
        """Start the sandbox and wait until its supervisor answers."""
        runsc = shutil.which("runsc")
        if runsc is None:
            raise SandboxError("runsc is missing (apt-get install runsc)")
        _check_home(spec.home)
        _private_dir(self.state_dir)
        container = spec.name
        bundle = self.state_dir / "bundles" / container
        flags = [
            runsc,
            f"--root={_private_dir(self.state_dir / 'runsc')}",
            f"--platform={PLATFORM}",
            f"--network={'sandbox' if spec.network == 'egress' else 'none'}",
            "--ignore-cgroups",
        ]
        _clear_stale(flags, container, bundle)
        cgroup = None
        helpers: list[subprocess.Popen[bytes]] = []
        try:
            if spec.cgroup_layout is not None:
                cgroup = Cgroup(spec.name, spec.cgroup_layout)
                cgroup.create(host_limits(spec.limits))
            netns = None
            if spec.network == "egress":
                holder = _netns_holder()
                helpers.append(holder)
                helpers.append(start_egress(holder.pid))
                guard_device(holder.pid)  # before runsc starts: nothing leaves unchecked
                netns = f"/proc/{holder.pid}/ns/net"
            write_bundle(bundle, spec, netns)
        except BaseException:
            _cleanup(helpers, cgroup, bundle)
            raise
        # runsc logs to stdout by default, which is where `ready` must come first.
        argv = [*flags, f"--log={bundle / 'runsc.log'}", "run", f"--bundle={bundle}", container]
        if netns is not None:
            argv = _inside_netns(netns, argv)
        if cgroup is not None:
            joins = "".join(f'echo $$ > "{path}" && ' for path in cgroup.procs_files())
            argv = ["/bin/sh", "-c", f'{joins}exec "$@"', "sh", *argv]  # joined before exec
        ours, theirs = socket.socketpair()
        ready_read, ready_write = os.pipe()
        errors = (bundle / "stderr").open("w+b")
        try:
            process = subprocess.Popen(
                argv,
                stdin=theirs.fileno(),  # the supervisor's control socket (fd 0 inside)
                stdout=ready_write,
                stderr=errors,
                cwd=bundle,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            os.close(ready_read)
            errors.close()
            _cleanup(helpers, cgroup, bundle)
            raise
        finally:
            theirs.close()
            os.close(ready_write)
        sandbox = GvisorSandbox(spec, self.name, process, ours, cgroup, helpers, runsc=flags)
        sandbox.container, sandbox.bundle = container, bundle
        try:
            log = bundle / "runsc.log"
            wait_until_ready(
                ready_read,
                process,
                errors,
                READY_TIMEOUT_S,
                "the gVisor sandbox",
                lambda: _log_tail(log),
            )
        except BaseException:
            sandbox.stop()
            raise
        finally:
            os.close(ready_read)
            errors.close()
        return sandbox


def host_limits(limits: Limits) -> Limits:
    """The host cgroup's limits for a sandbox with `limits` (see HOST_TASKS_PER_PROCESS)."""
    pids = limits.pids * HOST_TASKS_PER_PROCESS + GVISOR_TASKS
    return Limits(limits.memory_bytes + GVISOR_MEMORY, limits.cpus, pids)


@dataclass(frozen=True)
class Probe:
    """What one tiny test sandbox showed: why gVisor cannot run here, or what works badly."""

    failure: str | None
    notes: tuple[str, ...] = ()


def probe(runsc: str) -> Probe:
    """Start and end one tiny gVisor sandbox (about 0.15 s) that also tries `stat`."""
    argv = [runsc, f"--platform={PLATFORM}", "--network=none", "--ignore-cgroups", "do"]
    argv += ["--quiet", "--cwd=/", "/bin/sh", "-c", "stat / >/dev/null 2>&1 || exit 42"]
    try:
        done = subprocess.run(
            argv, cwd="/", capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return Probe(f"runsc did not start a test sandbox within {PROBE_TIMEOUT_S:.0f} s")
    except OSError as error:
        return Probe(f"runsc cannot be run: {error}")
    if done.returncode == 0:
        return Probe(None)
    if done.returncode == 42:
        return Probe(None, (STATX_NOTE,))
    output = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    detail = " / ".join(output[-3:]) or f"exit status {done.returncode}"
    return Probe(f"runsc --platform={PLATFORM} cannot start a sandbox here: {detail}")


def _run_runsc(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=RUNSC_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as error:
        raise SandboxError(f"{' '.join(argv[-2:])} did not answer") from error
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()[-500:]
        raise SandboxError(f"runsc {' '.join(argv[-2:])} failed: {detail}")


def _private_dir(path: Path) -> Path:
    """A directory only root can enter (runsc's state, the bundles)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _check_home(home: Path) -> None:
    # runsc binds by path: the home must be a real directory, not a link planted by the user.
    info = os.lstat(home)
    if not stat.S_ISDIR(info.st_mode):
        raise SandboxError(f"the sandbox home {home} is not a directory")


def _clear_stale(flags: list[str], container: str, bundle: Path) -> None:
    """A previous server may have died with this container registered."""
    with contextlib.suppress(SandboxError):
        _run_runsc([*flags, "delete", "--force", container])
    shutil.rmtree(bundle, ignore_errors=True)


def _cleanup(helpers: list[subprocess.Popen[bytes]], cgroup: Cgroup | None, bundle: Path) -> None:
    for helper in helpers:
        helper.kill()
        helper.wait()
    if cgroup is not None:
        cgroup.kill_all()
        cgroup.remove()
    shutil.rmtree(bundle, ignore_errors=True)


def _inside_netns(netns: str, argv: list[str]) -> list[str]:
    """Run argv in the sandbox's network namespace with rmem_default hidden (see the top)."""
    hide = 'mount -t tmpfs -o ro none /proc/sys/net/core && exec "$@"'
    enter = ["unshare", "--mount", "--propagation", "private", "--", "nsenter", f"--net={netns}"]
    return [*enter, "--", "/bin/sh", "-c", hide, "sh", *argv]


def _netns_holder() -> subprocess.Popen[bytes]:
    """A process in a fresh network namespace made by root (slirp4netns and runsc join it)."""
    holder = subprocess.Popen(
        ["unshare", "--net", "--", "/bin/sh", "-c", "echo up; exec sleep infinity"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert holder.stdout is not None
    ready, _, _ = select.select([holder.stdout], [], [], RUNSC_TIMEOUT_S)
    line = holder.stdout.readline() if ready else b""
    holder.stdout.close()
    if line != b"up\n":
        holder.kill()
        holder.wait()
        raise SandboxError("could not make a network namespace for the sandbox")
    return holder


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace").strip()[-2000:] if log.exists() else ""
