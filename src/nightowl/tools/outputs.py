"""`read_output`: page through, or search, a large output stored in the blob store."""

from __future__ import annotations

import asyncio
import re

from pydantic import BaseModel, Field

from nightowl.store.blobs import get_text
from nightowl.store.errors import NotFound
from nightowl.tools.registry import Tool, ToolContext, ToolResult

MAX_CHARS = 6_000


class ReadOutputArgs(BaseModel):
    """Arguments of read_output."""

    reference: str = Field(description="The blob:<sha256> reference from a tool result.")
    offset: int = Field(default=0, ge=0, description="First character to return.")
    limit: int = Field(default=4_000, ge=1, le=MAX_CHARS, description="How many characters.")
    pattern: str | None = Field(
        default=None, max_length=200, description="If set: return only lines matching this regex."
    )


async def _read_output(args: ReadOutputArgs, ctx: ToolContext) -> ToolResult:
    try:
        text = await asyncio.to_thread(get_text, ctx.blob_dir, args.reference)
    except NotFound as error:
        return ToolResult(f"{error}. Use the exact reference shown in the tool result.", True)
    if args.pattern is not None:
        try:
            matcher = re.compile(args.pattern)
        except re.error as error:
            return ToolResult(f"The pattern is not a valid regex ({error}); fix it.", True)
        lines = [
            f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1) if matcher.search(line)
        ]
        found = "\n".join(lines)
        return ToolResult(
            f"{len(lines)} matching lines:\n{found[: args.limit]}"
            + ("\n[… more matches; narrow the pattern]" if len(found) > args.limit else "")
        )
    part = text[args.offset : args.offset + args.limit]
    end = args.offset + len(part)
    more = f" Next: offset={end}." if end < len(text) else " That is the end."
    return ToolResult(f"Characters {args.offset}-{end} of {len(text)}.{more}\n{part}")


READ_OUTPUT = Tool(
    name="read_output",
    summary="Read part of, or grep, a large stored output by its blob: reference.",
    effect="read",
    arguments=ReadOutputArgs,
    run=_read_output,
    activity="reading a tool's output",
)
