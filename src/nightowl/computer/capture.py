"""Run a command inside a sandbox and keep what it printed (for short X11 tools: xdotool,
xdpyinfo, ImageMagick), and read the end of a log file there."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import SandboxError


@dataclass(frozen=True)
class Captured:
    """How a command ended, with what it printed (stdout and stderr together)."""

    exit_code: int | None  # None when it ran out of time
    output: str


async def capture(
    sandbox: Computer,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    limit: int = 8192,
) -> Captured:
    """Run argv inside and return its exit code and (the start of) its output.

    The pipe is read while the command runs (what is past `limit` is read and dropped): a
    command that prints more than a pipe holds (about 64 KB: `xdpyinfo`) would otherwise
    block on its write until its time ran out."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    kept = bytearray()
    loop = asyncio.get_running_loop()

    def drain() -> None:
        with contextlib.suppress(BlockingIOError):  # read what is there now
            while chunk := os.read(read_end, 65536):
                kept.extend(chunk[: max(0, limit - len(kept))])
            loop.remove_reader(read_end)  # end of file: every writer closed it

    loop.add_reader(read_end, drain)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            fds = [null, write_end, write_end]
            result = await sandbox.run(argv, env=env, timeout_s=timeout_s, fds=fds)
        finally:
            os.close(write_end)
            os.close(null)
        drain()  # the rest (a child that still holds the pipe: what it wrote so far)
    finally:
        loop.remove_reader(read_end)
        os.close(read_end)
    code = None if result.timed_out else result.exit_code
    return Captured(code, bytes(kept[:limit]).decode(errors="replace").strip())


async def tail(sandbox: Computer, path: str) -> str:
    try:
        answer = await sandbox.call({"op": "read", "path": path})
    except SandboxError as error:
        return str(error)
    return str(answer.get("text", "")).strip()[-500:] or "no output"
