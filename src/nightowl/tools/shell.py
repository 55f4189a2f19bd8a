"""`shell`: run a command in the owner's sandbox; the full output is kept as a file there.

When the owner has secrets, the command runs under the redacting filter
(safety/stream_filter.py), so the file never holds a secret's value in any common form.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from pydantic import BaseModel, Field

from nightowl.computer.sandbox import HOME_INSIDE, SandboxError
from nightowl.safety import stream_filter
from nightowl.tools.registry import Tool, ToolContext, ToolResult

HEAD_BYTES = 2_000
TAIL_BYTES = 6_000


class ShellArgs(BaseModel):
    """Arguments of shell."""

    command: str = Field(
        min_length=1,
        max_length=20_000,
        description="A /bin/sh command line. What it leaves running is stopped when it "
        "ends; use background=true for a server or a job that must keep running. A secret "
        "({{secret:NAME}}) is sent without asking the owner only by one plain `curl -q ...` "
        "to the secret's allowed hosts (its answer may be piped into jq, head or grep).",
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


@cache
def _filter_source() -> str:
    return Path(stream_filter.__file__).read_text()


def command_argv(command: str, ctx: ToolContext, output: str, background: bool) -> list[str]:
    """How the sandbox runs the command: through /bin/sh, and, when the owner has secrets,
    under the filter that writes its output redacted to `output` (relative to the home)."""
    shell = ["/bin/sh", "-c", command]
    if ctx.redaction is None:
        return shell
    spec = stream_filter.pack_spec(ctx.redaction.to_dict())
    mode = "eof" if background else "exit"
    # -I: no user site-packages or PYTHON* variables from the home change the filter.
    source = _filter_source()
    return ["/usr/bin/python3", "-I", "-c", source, spec, f"{HOME_INSIDE}/{output}", mode, *shell]


def _output_for_supervisor(ctx: ToolContext, output: str) -> str | None:
    """The supervisor writes the output file itself only when no filter does."""
    return output if ctx.redaction is None else None


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
                command_argv(args.command, ctx, output, background=True),
                output=_output_for_supervisor(ctx, output),
                cwd=args.cwd,
            )
        except SandboxError as error:
            return ToolResult(f"It could not start: {error}. Check the command and cwd.", True)
        return ToolResult(
            f"Started in the background (pid {pid}); its output goes to ~/{output}. "
            f"Stop it and its children with shell `kill -- -{pid}`."
        )
    started = time.monotonic()
    try:
        argv: str | Sequence[str] = (
            args.command
            if ctx.redaction is None
            else command_argv(args.command, ctx, output, background=False)
        )
        result = await sandbox.run(
            argv,
            output=_output_for_supervisor(ctx, output),
            timeout_s=args.timeout_s,
            cwd=args.cwd,
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
    # The output first, then how it ended: with the exit code on the first line, a small
    # model read the output line after it as nothing ("it produced no output").
    ended = f"exit code {result.exit_code} after {took:.1f} s"
    shown = f"{text.rstrip(chr(10))}{footer}\n({ended})" if size else f"(no output; {ended})"
    return ToolResult(
        shown,
        is_error=result.exit_code != 0,
        # The safety checks read the whole output, not only this excerpt.
        meta={"output_file": output} if long else {},
    )


SHELL = Tool(
    name="shell",
    summary="Run a shell command on your own Linux computer (home folder ~); output is kept.",
    effect="write",
    arguments=ShellArgs,
    run=_shell,
    activity="running a shell command",
    uses_secrets=True,
)
