"""A running sandbox as the server sees it: run commands and file operations inside, freeze it,
thaw it, stop it. Backends (bubblewrap, gVisor) differ only in how they start the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol

from nightowl.computer.cgroups import Cgroup, Limits
from nightowl.computer.errors import SandboxError as SandboxError

if TYPE_CHECKING:
    from nightowl.computer.protocol import Computer, Endpoint

Network = Literal["none", "egress"]
HOME_INSIDE = "/home/agent"
SUPERVISOR_SOURCE = (Path(__file__).parent / "supervisor.py").read_text()
PATH_INSIDE = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
# The longest answer line the supervisor may send: a read is up to 4 MB of text, which JSON
# escapes to up to 6 bytes a character (asyncio's own 64 KB default failed every read of a
# file past it with "Separator is not found").
MAX_ANSWER_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class SandboxSpec:
    """Everything a backend needs to start one user's sandbox."""

    name: str  # unique per user; names the cgroup
    uid: int  # the unprivileged host uid this sandbox runs as
    home: Path  # on the host; appears as /home/agent inside
    limits: Limits
    network: Network = "none"
    cgroup_layout: str | None = None  # 'v1' | 'v2' | None (prlimit only)


@dataclass
class ExecResult:
    """How a command ended."""

    exit_code: int | None  # None when it was killed by a timeout
    timed_out: bool = False


class Backend(Protocol):
    """One way to isolate a sandbox."""

    name: str

    def problems(self) -> list[str]:
        """Why this backend cannot work on this machine (empty when it can)."""
        ...

    def start(self, spec: SandboxSpec) -> Sandbox:
        """Start the sandbox's supervisor and return once it answers (blocking)."""
        ...


@dataclass
class Sandbox:
    """A started sandbox: its supervisor's control socket, its processes, its cgroup."""

    spec: SandboxSpec
    backend: str
    process: subprocess.Popen[bytes]
    control: socket.socket
    cgroup: Cgroup | None
    helpers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _send_lock: threading.Lock = field(default_factory=threading.Lock)

    # ---------- requests to the supervisor ----------

    def _open(self, request: dict[str, Any], fds: Sequence[int] = ()) -> socket.socket:
        ours, theirs = socket.socketpair()
        try:
            with self._send_lock:
                socket.send_fds(self.control, [b"r"], [theirs.fileno(), *fds])
        except OSError as error:
            ours.close()
            raise SandboxError(f"the sandbox is not running ({error})") from error
        finally:
            theirs.close()
        ours.sendall((json.dumps(request) + "\n").encode())
        return ours

    async def call(self, request: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """One request with one answer (file operations, ping, kill)."""
        conn = self._open(request)
        reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_ANSWER_BYTES)
        try:
            line = await asyncio.wait_for(reader.readline(), timeout_s)
        except TimeoutError:
            raise SandboxError(f"{request.get('op')} took over {timeout_s:g} s; stopped") from None
        finally:
            writer.close()
        if not line:
            raise SandboxError("the sandbox closed the request without an answer")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SandboxError(str(answer["error"]))
        return answer

    async def run(
        self,
        command: str | Sequence[str],
        *,
        output: str | None = None,
        timeout_s: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        fds: Sequence[int] = (),
    ) -> ExecResult:
        """Run a command inside and wait for it; cancelling this kills it and its children."""
        request: dict[str, Any] = {"op": "exec", "output": output, "cwd": cwd, "env": env or {}}
        if isinstance(command, str):
            request["command"] = command
        else:
            request["argv"] = list(command)
        conn = self._open(request, fds)
        reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_ANSWER_BYTES)
        pid, ended = None, b""
        try:
            started = json.loads(await reader.readline() or b'{"error": "no answer"}')
            if "error" in started:
                raise SandboxError(str(started["error"]))
            pid = int(started["pid"])
            try:
                ended = await asyncio.wait_for(reader.readline(), timeout_s)
            except TimeoutError:
                return ExecResult(None, timed_out=True)
            if not ended:
                raise SandboxError("the sandbox stopped while the command ran")
            answer = json.loads(ended)
            if "exit" not in answer:
                raise SandboxError(str(answer.get("error", "the command ended without a status")))
            return ExecResult(int(answer["exit"]))
        finally:
            # Closing our end is the signal: the supervisor kills what still runs. A command
            # cut short (preempted, timed out) is also killed explicitly, and that is awaited,
            # so the sandbox is never frozen before the kill is done.
            writer.close()
            if pid is not None and not ended:
                await asyncio.shield(self._kill_quietly(pid))

    async def _kill_quietly(self, pid: int) -> None:
        with contextlib.suppress(SandboxError, OSError, ValueError):
            await self.call({"op": "kill", "pid": pid}, timeout_s=5)

    async def start_daemon(
        self,
        argv: Sequence[str],
        *,
        output: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> int:
        """Start a long-running process inside (a display, a server); its pid inside."""
        request = {"op": "exec", "argv": list(argv), "daemon": True, "output": output}
        request["env"], request["cwd"] = env or {}, cwd
        conn = self._open(request)
        reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_ANSWER_BYTES)
        try:
            answer = json.loads(await reader.readline() or b"{}")
        finally:
            writer.close()
        if "error" in answer:
            raise SandboxError(str(answer["error"]))
        return int(answer["pid"])

    @contextlib.asynccontextmanager
    async def attached(
        self, argv: Sequence[str], fds: Sequence[int], env: dict[str, str] | None = None
    ) -> AsyncIterator[asyncio.StreamReader]:
        """Run a command with the caller's descriptors; it is killed when the block ends."""
        conn = self._open({"op": "exec", "argv": list(argv), "env": env or {}}, fds)
        reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_ANSWER_BYTES)
        try:
            started = json.loads(await reader.readline() or b"{}")
            if "error" in started:
                raise SandboxError(str(started["error"]))
            yield reader
        finally:
            writer.close()

    async def write_bytes(self, path: str, content: bytes) -> ExecResult:
        """Write a file as the sandbox's user, from inside (root never writes into the home):
        the bytes go in on a descriptor."""
        source = data_fd(content)
        sink = os.open(os.devnull, os.O_WRONLY)
        try:
            script = 'mkdir -p "$(dirname "$1")" && cat > "$1"'
            return await self.run(
                ["/bin/sh", "-c", script, "sh", path], fds=[source, sink, sink], timeout_s=30
            )
        finally:
            os.close(source)
            os.close(sink)

    # ---------- where it runs ----------

    @property
    def host(self) -> str | None:
        """None: it runs in this process."""
        return None

    def is_same_computer(self, other: Computer | None) -> bool:
        """Whether `other` is this very sandbox, still running."""
        return other is self and self.alive()

    def browser_endpoint(self) -> Endpoint | None:
        """None: the browser is launched here, through the launcher relay (browser.py)."""
        return None

    def stdio_endpoint(self) -> Endpoint | None:
        """None: a command's stdio is passed in as descriptors (`attached`)."""
        return None

    # ---------- lifecycle ----------

    def alive(self) -> bool:
        """Whether the sandbox's processes still run."""
        return self.process.poll() is None

    def freeze(self) -> None:
        """Stop all its processes where they stand (cgroup freezer); no-op without cgroups."""
        if self.cgroup is not None:
            self.cgroup.freeze()

    def thaw(self) -> None:
        """Let a frozen sandbox run again."""
        if self.cgroup is not None:
            self.cgroup.thaw()

    def stop(self) -> None:
        """Kill every process of the sandbox and release its resources (blocking)."""
        with contextlib.suppress(OSError):
            self.control.close()
        if self.cgroup is not None:
            self.cgroup.kill_all()
        for process in [self.process, *self.helpers]:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
        if self.cgroup is not None:
            self.cgroup.remove()


if TYPE_CHECKING:
    _IS_A_COMPUTER: type[Computer] = Sandbox  # mypy checks that it meets the protocol


def passwd_entries(uid: int) -> tuple[bytes, bytes]:
    """/etc/passwd and /etc/group for inside: the agent's own account and root's."""
    passwd = f"root:x:0:0:root:/root:/bin/sh\nagent:x:{uid}:{uid}:agent:{HOME_INSIDE}:/bin/bash\n"
    group = f"root:x:0:\nagent:x:{uid}:\n"
    return passwd.encode(), group.encode()


def data_fd(content: bytes) -> int:
    """An anonymous file holding `content`, positioned at its start (for --ro-bind-data)."""
    fd = os.memfd_create("nightowl-data", 0)
    os.write(fd, content)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def wait_until_ready(
    fd: int,
    process: subprocess.Popen[bytes],
    errors: IO[bytes],
    timeout_s: float,
    what: str,
    more_detail: Callable[[], str] = lambda: "",
) -> None:
    """Wait for the supervisor's `ready` line on `fd`; else raise with what the backend said
    on stderr (kept in `errors`), or `more_detail()` when it said nothing."""
    ready, _, _ = select.select([fd], [], [], timeout_s)
    line = os.read(fd, 64) if ready else b""
    if line.startswith(b"ready"):
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=2)
    errors.seek(0)
    detail = errors.read(2000).decode(errors="replace").strip() or more_detail()
    raise SandboxError(f"{what} did not start: {detail or 'no answer from its supervisor'}")
