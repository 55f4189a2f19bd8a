"""`read_output`: page through, or search, a large output stored in the blob store."""

from __future__ import annotations

import asyncio
import re

from pydantic import BaseModel, Field

from nightowl.store.blobs import get_text
from nightowl.store.errors import NotFound
from nightowl.store.output_blobs import output_blob_trust
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


def _owned(ctx: ToolContext, reference: str) -> tuple[str, str] | None:
    """The output's text and the trust of its source, if it is one of the owner's outputs."""
    with ctx.database.read() as session:
        trust = output_blob_trust(session, ctx.owner_id, reference.strip())
    if trust is None:
        return None
    return get_text(ctx.blob_dir, reference.strip()), trust


async def _read_output(args: ReadOutputArgs, ctx: ToolContext) -> ToolResult:
    try:
        found = await asyncio.to_thread(_owned, ctx, args.reference)
    except NotFound:
        found = None
    if found is None:
        return ToolResult(
            f"There is no stored output {args.reference!r} of yours. Use the exact blob: "
            "reference shown in a tool result of yours.",
            is_error=True,
            meta={"trust": "agent"},
        )
    text, trust = found
    # What it returns is read from the original: it carries the original's trust.
    meta = {"trust": trust}
    if args.pattern is not None:
        try:
            matcher = re.compile(args.pattern)
        except re.error as error:
            return ToolResult(
                f"The pattern is not a valid regex ({error}); fix it.",
                True,
                meta={"trust": "agent"},
            )
        lines = [
            f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1) if matcher.search(line)
        ]
        matched = "\n".join(lines)
        return ToolResult(
            f"{len(lines)} matching lines:\n{matched[: args.limit]}"
            + ("\n[… more matches; narrow the pattern]" if len(matched) > args.limit else ""),
            meta=meta,
        )
    part = text[args.offset : args.offset + args.limit]
    end = args.offset + len(part)
    more = f" Next: offset={end}." if end < len(text) else " That is the end."
    return ToolResult(f"Characters {args.offset}-{end} of {len(text)}.{more}\n{part}", meta=meta)


READ_OUTPUT = Tool(
    name="read_output",
    summary="Read part of, or grep, a large stored output by its blob: reference.",
    effect="read",
    arguments=ReadOutputArgs,
    run=_read_output,
    activity="reading a tool's output",
)
