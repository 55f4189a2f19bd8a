"""File tools on the owner's computer: read_file, write_file, list_files, search_files.

They run inside the sandbox (as its user, in its namespaces), so a link the agent made can
never lead them anywhere the sandbox itself cannot go.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field, field_validator

from nightowl.computer.sandbox import SandboxError
from nightowl.tools.registry import Tool, ToolContext, ToolResult

MAX_LINES = 2_000
MAX_CHARS = 20_000


class ReadFileArgs(BaseModel):
    """Arguments of read_file."""

    path: str = Field(min_length=1, max_length=1000, description="Path; relative to ~.")
    offset: int = Field(default=1, ge=1, description="First line to return (1-based).")
    limit: int = Field(default=400, ge=1, le=MAX_LINES, description="How many lines.")


class WriteFileArgs(BaseModel):
    """Arguments of write_file."""

    path: str = Field(min_length=1, max_length=1000, description="Path; relative to ~.")
    content: str = Field(max_length=2_000_000, description="The whole new content.")
    append: bool = Field(default=False, description="Add to the end instead of replacing.")


class ListFilesArgs(BaseModel):
    """Arguments of list_files."""

    path: str = Field(default="~", max_length=1000, description="Folder; relative to ~.")
    depth: int = Field(default=1, ge=1, le=6, description="How many levels down.")


class SearchFilesArgs(BaseModel):
    """Arguments of search_files."""

    pattern: str = Field(min_length=1, max_length=500, description="A regular expression.")
    path: str = Field(default="~", max_length=1000, description="Folder or file to search.")
    glob: str = Field(default="*", max_length=200, description="Only file names like this.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a valid regular expression ({error})") from None
        return value


async def _ask(ctx: ToolContext, request: dict[str, Any]) -> dict[str, Any] | ToolResult:
    try:
        sandbox = await ctx.sandbox()
        return await sandbox.call(request)
    except SandboxError as error:
        text = str(error)
        if "FileNotFoundError" in text:
            hint = "No such file or folder; list_files shows what is there."
        elif "IsADirectoryError" in text:
            hint = "That is a folder; use list_files."
        elif "NotADirectoryError" in text:
            hint = "That is a file, not a folder; use read_file."
        elif "PermissionError" in text or "Read-only file system" in text:
            hint = "Permission denied: only your home folder and /tmp are writable."
        else:
            hint = "Check the path and try again."
        return ToolResult(f"{request['op']} failed: {text}. {hint}", is_error=True)


async def _same_name(ctx: ToolContext, path: str) -> list[str]:
    """Files in the home named like the last part of `path` (up to 5, four folders deep): a
    model that guessed the folder (its scratch folder, say) finds the file it meant."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name in ("", "~", ".", ".."):
        return []
    try:
        sandbox = await ctx.sandbox()
        answer = await sandbox.call({"op": "list", "path": "~", "depth": 4, "limit": 5_000})
    except SandboxError:
        return []
    entries = answer.get("entries", [])
    found = [e["path"] for e in entries if not e.get("dir") and e["path"].endswith(f"/{name}")]
    return found[:5]


async def _read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolResult:
    path, instead = args.path, ""
    answer = await _ask(ctx, {"op": "read", "path": path})
    if isinstance(answer, ToolResult):
        if "FileNotFoundError" not in answer.content:
            return answer
        found = await _same_name(ctx, path)
        if len(found) != 1:
            where = f" Files of that name are at: {', '.join(found)}." if found else ""
            return ToolResult(answer.content + where, is_error=True)
        # One file of that name: a read harms nothing, so it is read (and said so) rather
        # than sending a small model back to try again, which it often did not.
        path = found[0]
        instead = f"(There is no {args.path}; this is {path}, the one file of that name in "
        instead += "your home.)\n"
        answer = await _ask(ctx, {"op": "read", "path": path})
        if isinstance(answer, ToolResult):
            return answer
    if answer.get("binary"):
        return ToolResult(
            f"{path} is a binary file of {answer['size']} bytes; "
            "use shell (file, xxd, python) to look inside.",
            is_error=True,
        )
    lines = answer["text"].splitlines()
    shown: list[str] = []
    size = 0
    for n, line in enumerate(lines[args.offset - 1 : args.offset - 1 + args.limit], args.offset):
        numbered = f"{n:>6}\t{line}"
        if shown and size + len(numbered) > MAX_CHARS:
            break  # whole lines only: the next offset starts where this stops
        shown.append(numbered[:MAX_CHARS])
        size += len(numbered) + 1
    body = "\n".join(shown)
    end = args.offset + len(shown) - 1
    more = f" Next: offset={end + 1}." if end < len(lines) else ""
    cut = " (the file is larger than 4 MB; only its start was read)" if answer.get("cut") else ""
    return ToolResult(
        f"{instead}{path}: lines {args.offset}-{end} of {len(lines)}{cut}.{more}\n{body}"
    )


async def _write_file(args: WriteFileArgs, ctx: ToolContext) -> ToolResult:
    request = {"op": "write", "path": args.path, "content": args.content, "append": args.append}
    answer = await _ask(ctx, request)
    if isinstance(answer, ToolResult):
        return answer
    verb = "Appended" if args.append else "Wrote"
    return ToolResult(f"{verb} {answer['bytes']} bytes to {answer['path']}.")


async def _list_files(args: ListFilesArgs, ctx: ToolContext) -> ToolResult:
    answer = await _ask(ctx, {"op": "list", "path": args.path, "depth": args.depth})
    if isinstance(answer, ToolResult):
        return answer
    lines = [
        f"{e['path']}/" if e.get("dir") else f"{e['path']}  ({e['size']} bytes)"
        for e in answer["entries"]
    ]
    if not lines:
        return ToolResult(f"{args.path} is empty.")
    cut = "\n[… more entries; list a sub-folder]" if answer.get("cut") else ""
    return ToolResult("\n".join(lines) + cut)


async def _search_files(args: SearchFilesArgs, ctx: ToolContext) -> ToolResult:
    request = {"op": "search", "pattern": args.pattern, "path": args.path, "glob": args.glob}
    answer = await _ask(ctx, request)
    if isinstance(answer, ToolResult):
        return answer
    matches = answer["matches"]
    if not matches:
        return ToolResult(f"No line matches {args.pattern!r} under {args.path}.")
    lines = [f"{m['path']}:{m['line']}: {m['text']}" for m in matches]
    cut = "\n[… more matches; narrow the pattern or the folder]" if answer.get("cut") else ""
    return ToolResult(f"{len(matches)} matches:\n" + "\n".join(lines) + cut)


FILE_TOOLS = [
    Tool(
        name="read_file",
        summary="Read lines of a text file on your computer.",
        effect="read",
        arguments=ReadFileArgs,
        run=_read_file,
        activity="reading a file",
    ),
    Tool(
        name="write_file",
        summary="Create, replace or append to a file on your computer.",
        effect="write",
        arguments=WriteFileArgs,
        run=_write_file,
        activity="writing a file",
        output_trust="agent",  # a confirmation in nightowl's words
    ),
    Tool(
        name="list_files",
        summary="List a folder on your computer.",
        effect="read",
        arguments=ListFilesArgs,
        run=_list_files,
        activity="looking through files",
    ),
    Tool(
        name="search_files",
        summary="Find lines matching a regex in files on your computer (like grep -rn).",
        effect="read",
        arguments=SearchFilesArgs,
        run=_search_files,
        activity="searching files",
    ),
]
