"""Run a command inside a sandbox and keep what it printed (for short X11 tools: xdotool,
xdpyinfo, ImageMagick), and read the end of a log file there."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from nightowl.computer.sandbox import Sandbox, SandboxError


@dataclass(frozen=True)
class Captured:
    """How a command ended, with what it printed (stdout and stderr together)."""

    exit_code: int | None  # None when it ran out of time
    output: str


async def capture(
    sandbox: Sandbox,
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    limit: int = 8192,
) -> Captured:
    """Run argv inside and return its exit code and (the start of) its output."""
    read_end, write_end = os.pipe()
    output = b""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            fds = [null, write_end, write_end]
            result = await sandbox.run(argv, env=env, timeout_s=timeout_s, fds=fds)
        finally:
            os.close(write_end)
            os.close(null)
        os.set_blocking(read_end, False)
        with contextlib.suppress(BlockingIOError):  # a child still holds the pipe: enough
            while len(output) < limit and (chunk := os.read(read_end, 65536)):
                output += chunk
    finally:
        os.close(read_end)
    code = None if result.timed_out else result.exit_code
    return Captured(code, output[:limit].decode(errors="replace").strip())


async def tail(sandbox: Sandbox, path: str) -> str:
    try:
        answer = await sandbox.call({"op": "read", "path": path})
    except SandboxError as error:
        return str(error)
    return str(answer.get("text", "")).strip()[-500:] or "no output"
