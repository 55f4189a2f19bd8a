"""The sandbox's first process: runs commands and file operations for the server, inside.

It is started by a backend as the sandbox's init child, with no privileges, and runs with the
system's own Python (`/usr/bin/python3 -I -S`), so it must use the standard library only and
must not import nightowl. It talks to the server over an inherited control socket (fd 3): for
every request the server sends one byte carrying, by SCM_RIGHTS, a fresh socket for that request
(and, for `exec` with `stdio`, the file descriptors the command gets as 0, 1, 2 and more).
A request is one JSON line; replies are JSON lines. When the server closes a request's socket
before its command finished, the command's whole process group is killed: that is how a
preempted turn stops its shell command.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

TYPE_CHECKING = False  # not typing's: importing typing costs the cold start ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import IO

CONTROL_FD = 3
MAX_EXTRA_FDS = 2  # descriptors a command gets beyond 0-2 (a browser's pipe on 3 and 4)
HOME = os.environ.get("HOME", "/home/agent")
MAX_READ_BYTES = 4 * 1024 * 1024
MAX_BYTES_READ = 32 * 1024 * 1024  # a file's bytes, read whole (an attachment)
MAX_SEARCH_FILE_BYTES = 2 * 1024 * 1024
daemons: dict[int, subprocess.Popen[bytes]] = {}


def _send(conn: socket.socket, message: dict[str, object]) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _read_request(conn: socket.socket) -> dict[str, object]:
    chunks: list[bytes] = []  # joined once: a file written whole can be megabytes
    while not chunks or not chunks[-1].endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("request cut short")
        chunks.append(chunk)
    request = json.loads(b"".join(chunks))
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    return request


def _resolve(path: object) -> str:
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty string")
    return os.path.normpath(os.path.join(HOME, os.path.expanduser(path)))


def _environment(extra: object) -> dict[str, str]:
    env = dict(os.environ)
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def _exec(conn: socket.socket, request: dict[str, object], fds: list[int]) -> None:
    argv = request.get("argv")
    if not isinstance(argv, list) or not argv:
        argv = ["/bin/sh", "-c", str(request["command"])]
    output = request.get("output")
    out_file = None
    if output:
        os.makedirs(os.path.dirname(_resolve(output)), exist_ok=True)
        out_file = open(_resolve(output), "wb")  # noqa: SIM115
    stdin: int = subprocess.DEVNULL
    stdout: int | IO[bytes] = subprocess.DEVNULL
    stderr: int | IO[bytes] | None = None
    if fds:
        # The caller's own descriptors: 0, 1, 2 and any beyond (a browser's pipe on 3 and 4).
        stdin, stdout, stderr = fds[0], fds[1], fds[2]
    elif out_file is not None:
        stdout, stderr = out_file, subprocess.STDOUT
    extra = fds[3:]
    try:
        if len(extra) > MAX_EXTRA_FDS:
            raise ValueError(f"at most {MAX_EXTRA_FDS} descriptors beyond 0-2")
        process = subprocess.Popen(
            [str(a) for a in argv],
            cwd=_resolve(request.get("cwd") or HOME),
            env=_environment(request.get("env")),
            start_new_session=True,
            pass_fds=tuple(range(3, 3 + len(extra))) if extra else (),
            preexec_fn=(lambda: _place_fds(extra)) if extra else None,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )
    finally:
        if out_file is not None:
            out_file.close()
        for fd in fds:
            os.close(fd)
    if request.get("daemon"):
        daemons[process.pid] = process
        _send(conn, {"pid": process.pid})
        return
    _send(conn, {"pid": process.pid})
    pidfd = os.pidfd_open(process.pid)
    try:
        ready, _, _ = select.select([conn.fileno(), pidfd], [], [])
        if conn.fileno() in ready and pidfd not in ready:
            # The server went away (preemption, timeout): stop the command and its children.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
        # What the command left running in its group goes too (a fork bomb's children, a
        # forgotten `&`); a service meant to stay starts itself with `setsid`.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    with contextlib.suppress(OSError):
        _send(conn, {"exit": code})


def _place_fds(extra: list[int]) -> None:
    # Runs in the child between fork and exec: put the extra descriptors at 3, 4, ...
    for target, fd in enumerate(extra, start=3):
        if fd != target:
            os.dup2(fd, target)


def _kill(request: dict[str, object]) -> dict[str, object]:
    pid = int(str(request["pid"]))
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    process = daemons.pop(pid, None)
    if process is not None:
        process.wait()
    for _ in range(200):  # answer once the whole group is gone (killed ones are reaped fast)
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.005)
    return {"ok": True}


def _regular(path: str) -> None:
    """Refuse what is not a regular file (a FIFO would block the reader forever)."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path} is not a regular file (a pipe, socket or device)")


def _read(request: dict[str, object]) -> dict[str, object]:
    path = _resolve(request["path"])
    _regular(path)
    size = os.path.getsize(path)
    if request.get("encoding") == "base64":  # a file's bytes (an attachment, on a tier)
        limit = min(int(str(request.get("limit", MAX_READ_BYTES))), MAX_BYTES_READ)
        if size > limit:
            return {"size": size, "too_big": True}
        with open(path, "rb") as file:
            data = file.read(limit + 1)
        return {"base64": base64.b64encode(data[:limit]).decode(), "size": len(data)}
    head, tail = int(str(request.get("head", 0))), int(str(request.get("tail", 0)))
    if head or tail:  # an excerpt: the start and the end of a long output
        with open(path, "rb") as file:
            first = file.read(min(head, MAX_READ_BYTES))
            file.seek(max(len(first), size - min(tail, MAX_READ_BYTES)))
            last = file.read()
        return {
            "head": first.decode("utf-8", "replace"),
            "tail": last.decode("utf-8", "replace"),
            "size": size,
        }
    with open(path, "rb") as file:
        data = file.read(MAX_READ_BYTES)
    if b"\0" in data[:8192]:
        return {"binary": True, "size": size}
    return {"text": data.decode("utf-8", "replace"), "size": size, "cut": size > len(data)}


def _write(request: dict[str, object]) -> dict[str, object]:
    path = _resolve(request["path"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    content = str(request.get("content", ""))
    # A file's bytes (one received on a channel, on a tier), or text.
    binary = request.get("encoding") == "base64"
    data = base64.b64decode(content, validate=True) if binary else content.encode()
    if request.get("append"):
        with open(path, "ab") as file:
            file.write(data)
        return {"path": path, "bytes": len(data)}
    partial = f"{path}.partial-{os.getpid()}"
    with open(partial, "wb") as file:
        file.write(data)
    os.replace(partial, path)  # whole or not at all
    return {"path": path, "bytes": len(data)}


def _list(request: dict[str, object]) -> dict[str, object]:
    root = _resolve(request.get("path") or HOME)
    if not os.path.isdir(root):
        if os.path.exists(root):
            raise NotADirectoryError(f"{root} is a file")
        raise FileNotFoundError(f"{root} does not exist")
    depth = int(str(request.get("depth", 1)))
    limit = int(str(request.get("limit", 500)))
    entries: list[dict[str, object]] = []
    base_depth = root.rstrip("/").count("/")
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        if folder.rstrip("/").count("/") - base_depth >= depth:
            dirs[:] = []
        for name in sorted(dirs):
            entries.append({"path": os.path.join(folder, name), "dir": True})
        for name in sorted(files):
            full = os.path.join(folder, name)
            try:
                size = os.lstat(full).st_size
            except OSError:
                continue
            entries.append({"path": full, "size": size})
        if len(entries) >= limit:
            return {"entries": entries[:limit], "cut": True}
    return {"entries": entries, "cut": False}


def _search(request: dict[str, object]) -> dict[str, object]:
    import fnmatch  # only searches need it: every import costs the cold start

    root = _resolve(request.get("path") or HOME)
    pattern = re.compile(str(request["pattern"]))
    glob = str(request.get("glob") or "*")
    limit = int(str(request.get("limit", 200)))
    found: list[dict[str, object]] = []
    if os.path.isfile(root):  # one file: search it, whatever its name
        walk: Iterable[tuple[str, list[str], list[str]]] = [
            (os.path.dirname(root), [], [os.path.basename(root)])
        ]
        glob = "*"
    else:
        walk = os.walk(root)
    for folder, dirs, files in walk:
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not fnmatch.fnmatch(name, glob):
                continue
            full = os.path.join(folder, name)
            try:
                info = os.lstat(full)
                if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SEARCH_FILE_BYTES:
                    continue
                with open(full, "rb") as file:
                    data = file.read()
            except OSError:
                continue
            if b"\0" in data[:8192]:
                continue
            for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if pattern.search(line):
                    found.append({"path": full, "line": number, "text": line[:300]})
                    if len(found) >= limit:
                        return {"matches": found, "cut": True}
    return {"matches": found, "cut": False}


OPERATIONS = {"kill": _kill, "read": _read, "write": _write, "list": _list, "search": _search}


def _serve(conn: socket.socket, fds: list[int]) -> None:
    with conn:
        try:
            request = _read_request(conn)
            op = request.get("op")
            if op == "exec":
                _exec(conn, request, fds)
            elif op == "ping":
                _send(conn, {"ok": True, "pid": os.getpid()})
            elif op in OPERATIONS:
                _send(conn, OPERATIONS[str(op)](request))
            else:
                _send(conn, {"error": f"unknown operation {op!r}"})
        except Exception as error:  # every failure goes back to the server, worded
            with contextlib.suppress(OSError):
                _send(conn, {"error": f"{type(error).__name__}: {error}"})


def _reap(_signum: int, _frame: object) -> None:
    for pid, process in list(daemons.items()):
        if process.poll() is not None:
            daemons.pop(pid, None)


def _reserve_fds() -> None:
    # Popen checks that each of pass_fds (3, 4) is open here before the child places the
    # caller's descriptors there: keep them open for good, so that a request's socket closed
    # meanwhile by another thread cannot leave 4 free (the launch then failed with EBADF).
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    for fd in range(3, 3 + MAX_EXTRA_FDS):
        try:
            os.fstat(fd)
        except OSError:
            os.dup2(null, fd, inheritable=False)
    if null >= 3 + MAX_EXTRA_FDS:
        os.close(null)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]) if len(sys.argv) > 1 else CONTROL_FD)
    _reserve_fds()
    signal.signal(signal.SIGCHLD, _reap)
    os.write(1, b"ready\n")
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(control, 1, 16)
        except InterruptedError:
            continue
        if not fds:
            return  # the server closed the control socket: the sandbox ends
        conn = socket.socket(fileno=fds[0])
        try:
            threading.Thread(target=_serve, args=(conn, fds[1:]), daemon=True).start()
        except RuntimeError:  # no thread to be had (a fork bomb filled the pids limit)
            for fd in fds[1:]:
                os.close(fd)
            conn.close()  # the server sees the request fail; the supervisor goes on


if __name__ == "__main__":
    main()
