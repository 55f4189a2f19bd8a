"""`shell`: run a command in the owner's sandbox; the full output is kept as a file there."""

from __future__ import annotations

import re
import time

from pydantic import BaseModel, Field

from nightowl.computer.sandbox import SandboxError
from nightowl.tools.registry import Tool, ToolContext, ToolResult

HEAD_BYTES = 2_000
TAIL_BYTES = 6_000


class ShellArgs(BaseModel):
    """Arguments of shell."""

    command: str = Field(
        min_length=1,
        max_length=20_000,
        description="A /bin/sh command line. What it leaves running is stopped when it "
        "ends; use background=true for a server or a job that must keep running.",
    )
    timeout_s: float = Field(
        default=120, gt=0, le=3600, description="Kill it after this many seconds."
    )
    cwd: str | None = Field(
        default=None, max_length=1000, description="Working folder (default: the home folder)."
    )
    background: bool = Field(
        default=False, description="Start it and return at once; it keeps running."
    )


def output_path(ctx: ToolContext) -> str:
    """Where, relative to the home, this call's full output is kept."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{ctx.turn_id}-{ctx.call_id}")
    return f".nightowl/outputs/{name}.log"


async def _shell(args: ShellArgs, ctx: ToolContext) -> ToolResult:
    try:
        sandbox = await ctx.sandbox()
    except SandboxError as error:
        return ToolResult(f"No computer is available: {error}. Do without the shell.", True)
    output = output_path(ctx)
    if args.background:
        try:
            pid = await sandbox.start_daemon(
                ["/bin/sh", "-c", args.command], output=output, cwd=args.cwd
            )
        except SandboxError as error:
            return ToolResult(f"It could not start: {error}. Check the command and cwd.", True)
        return ToolResult(
            f"Started in the background (pid {pid}); its output goes to ~/{output}. "
            f"Stop it and its children with shell `kill -- -{pid}`."
        )
    started = time.monotonic()
    try:
        result = await sandbox.run(
            args.command, output=output, timeout_s=args.timeout_s, cwd=args.cwd
        )
        excerpt = await sandbox.call(
            {"op": "read", "path": output, "head": HEAD_BYTES, "tail": TAIL_BYTES}
        )
    except SandboxError as error:
        return ToolResult(f"The command could not run: {error}. Check the command and cwd.", True)
    took = time.monotonic() - started
    size = int(excerpt["size"])
    long = size > HEAD_BYTES + TAIL_BYTES
    gap = f"\n[… {size - HEAD_BYTES - TAIL_BYTES} bytes left out …]\n" if long else ""
    text = excerpt["head"] + gap + excerpt["tail"]
    where = f"~/{output}"
    if result.timed_out:
        return ToolResult(
            f"Timed out after {args.timeout_s:g} s and was killed. Output so far ({size} bytes, "
            f"all of it in {where}):\n{text}",
            is_error=True,
        )
    footer = f"\n[full output: {where}, {size} bytes; read_file or search_files it]" if long else ""
    return ToolResult(
        f"exit code {result.exit_code} after {took:.1f} s\n{text}{footer}",
        is_error=result.exit_code != 0,
    )


SHELL = Tool(
    name="shell",
    summary="Run a shell command on your own Linux computer (home folder ~); output is kept.",
    effect="write",
    arguments=ShellArgs,
    run=_shell,
    activity="running a shell command",
)
