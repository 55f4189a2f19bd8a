"""`send_to_user`: the agent's only visible output, delivered through the outbox exactly once.

A message with buttons or a draft is a question: the turn waits (durably, in its workflow)
for the owner's answer, which comes back as this call's result.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
import os
import posixpath
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import HOME_INSIDE, SandboxError
from nightowl.store.blobs import put_bytes
from nightowl.store.outbox import deliver_to_user
from nightowl.store.questions import wait_for_answer
from nightowl.tools.registry import Tool, ToolContext, ToolResult


class Button(BaseModel):
    """A button the user can press; its value comes back as their answer."""

    label: str = Field(min_length=1, max_length=80)
    value: str = Field(min_length=1, max_length=200)


class SendToUserArgs(BaseModel):
    """Arguments of send_to_user."""

    text: str = Field(min_length=1, max_length=32_000, description="Markdown to show the user.")
    files: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Files to attach: paths in your home folder (images show inline).",
    )
    buttons: list[Button] = Field(
        default_factory=list,
        max_length=6,
        description="Answers the user can click; you wait for the click and get its value.",
    )
    draft: str | None = Field(
        default=None,
        max_length=32_000,
        description="Editable draft (Send / Discard); you wait and get the final text or discard.",
    )
    ask: Literal["question", "approval"] = Field(
        default="question", description="With buttons: 'approval' when asking for permission."
    )
    final: bool = Field(default=False, description="True ends the turn after this message.")
    important: bool = Field(
        default=False, description="True raises a notification (for background work)."
    )

    @model_validator(mode="after")
    def _one_kind_of_question(self) -> SendToUserArgs:
        if self.buttons and self.draft is not None:
            raise ValueError("give buttons or a draft, not both; ask one thing at a time")
        values = [b.value for b in self.buttons]
        if len(set(values)) != len(values):
            raise ValueError("every button needs its own value")
        return self


def _waiting_label(args: SendToUserArgs) -> str:
    if args.draft is not None:
        return "waiting for you to review a draft"
    return "waiting for your approval" if args.ask == "approval" else "waiting for your answer"


def _read_inside(home: Path, relative: PurePosixPath, limit: int) -> bytes | int:
    """The file's bytes, opened one component at a time without following any link (the
    sandbox may swap a folder for a link between a check and a read); its size if too big."""
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in relative.parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        inner = os.open(relative.parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
        os.close(fd)
        fd = inner
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileNotFoundError(str(relative))
        if info.st_size > limit:
            return info.st_size
        with os.fdopen(fd, "rb") as file:
            fd = -1
            return file.read(limit + 1)
    finally:
        if fd >= 0:
            os.close(fd)


def _relative(given: str) -> PurePosixPath | str:
    """A path as the tools name it (/home/agent/…, ~/…, or relative) made relative to the
    home; a message for the agent when it leads outside it (or is the home itself)."""
    inside = given.removeprefix(HOME_INSIDE + "/").removeprefix("~/").lstrip("/")
    relative = posixpath.normpath(inside) if inside else "."
    if relative == "." or relative == ".." or relative.startswith("../"):
        return f"{given!r} is outside your home folder; attach files from inside it."
    return PurePosixPath(relative)


def _too_big(given: str, size: int, limit: int) -> str:
    return (
        f"{given!r} is {size:,} bytes; the limit is {limit:,}. "
        "Compress it or send a smaller excerpt."
    )


def _attached(name: str, data: bytes, ctx: ToolContext) -> dict[str, Any]:
    return {
        "name": name,
        "blob": put_bytes(ctx.blob_dir, data),
        "size": len(data),
        "content_type": mimetypes.guess_type(name)[0] or "application/octet-stream",
    }


def _missing(given: str) -> str:
    """What the agent hears when `files` names no file (small models put their text there)."""
    return (
        f"{given!r} does not exist in your home folder. `files` only attaches files that "
        "exist: put what you have to say in `text`, and name a file only once it is written."
    )


def attach_files(paths: list[str], ctx: ToolContext) -> list[dict[str, Any]] | str:
    """Copy each file of the home on this machine into the blob store; a problem comes back
    as a message for the agent."""
    home = ctx.home.resolve()
    attached = []
    for given in paths:
        relative = _relative(given)
        if isinstance(relative, str):
            return relative
        path = (home / relative).resolve()  # a link out of the home leads outside
        if not path.is_relative_to(home) or path == home:
            return f"{given!r} is outside your home folder; attach files from inside it."
        try:
            relative = PurePosixPath(path.relative_to(home))
            data = _read_inside(home, relative, ctx.max_attachment_bytes)
        except OSError:
            return _missing(given)
        if isinstance(data, int) or len(data) > ctx.max_attachment_bytes:
            size = data if isinstance(data, int) else len(data)
            return _too_big(given, size, ctx.max_attachment_bytes)
        attached.append(_attached(path.name, data, ctx))
    return attached


async def attach_remote_files(
    paths: list[str], ctx: ToolContext, sandbox: Computer
) -> list[dict[str, Any]] | str:
    """`attach_files` for a computer on a computer host: each file is read inside the
    computer (the sandbox's own view, where a link reaches only what the agent can read
    anyway) and its bytes come over the tier."""
    attached = []
    for given in paths:
        relative = _relative(given)
        if isinstance(relative, str):
            return relative
        request = {
            "op": "read",
            "path": f"{HOME_INSIDE}/{relative}",
            "encoding": "base64",
            "limit": ctx.max_attachment_bytes,
        }
        try:
            answer = await sandbox.call(request, timeout_s=120)
        except SandboxError:
            return _missing(given)
        if answer.get("too_big") or "base64" not in answer:
            return _too_big(given, int(answer.get("size", 0)), ctx.max_attachment_bytes)
        data = base64.b64decode(answer["base64"])
        attached.append(await asyncio.to_thread(_attached, relative.name, data, ctx))
    return attached


async def _files(args: SendToUserArgs, ctx: ToolContext) -> list[dict[str, Any]] | str:
    """The message's files, from the home wherever the computer runs."""
    if args.files and ctx.computers is not None and not ctx.computers.homes_here:
        try:
            sandbox = await ctx.sandbox()
        except SandboxError as error:
            return f"your computer cannot be reached to read the files ({error})"
        return await attach_remote_files(args.files, ctx, sandbox)
    return await asyncio.to_thread(attach_files, args.files, ctx)


async def _send_to_user(args: SendToUserArgs, ctx: ToolContext) -> ToolResult:
    files = await _files(args, ctx)
    if isinstance(files, str):
        return ToolResult(f"Nothing was sent: {files}", is_error=True)
    controls: dict[str, object] = {}
    if args.buttons:
        controls = {"buttons": [b.model_dump() for b in args.buttons], "ask": args.ask}
    elif args.draft is not None:
        controls = {"draft": args.draft}
    meta = {"files": files, "controls": controls, "important": args.important}
    waiting = _waiting_label(args) if controls else ""

    def deliver() -> tuple[str, int]:
        with ctx.database.write() as session:
            message = deliver_to_user(
                session,
                ctx.conversation_id,
                key=f"out:{ctx.turn_id}:{ctx.call_id}",
                body=args.text,
                turn_id=ctx.turn_id,
                meta=meta,
            )
            if waiting:
                wait_for_answer(session, ctx.turn_id, message.id, waiting)
            return message.id, message.seq

    message_id, seq = await asyncio.to_thread(deliver)
    if waiting:
        return ToolResult(
            f"Delivered to the user (message #{seq}).",
            ends_turn=args.final,
            meta={"ask": {"message_id": message_id}},
        )
    return ToolResult(f"Delivered to the user (message #{seq}).", ends_turn=args.final)


def answer_for_agent(answer: dict[str, Any] | None, waited: str) -> str:
    """The answer to a question as the agent reads it (the result of its send_to_user call)."""
    if answer is None:
        return (
            f"No answer after {waited}; the question is closed. Go on without it, "
            "or ask again later if it still matters."
        )
    if "value" in answer:
        return f"The user clicked {answer['label']!r} (value: {answer['value']!r})."
    if answer.get("action") == "send":
        return f"The user chose Send. The final text of the draft:\n{answer['text']}"
    return "The user discarded the draft. Do not send it."


SEND_TO_USER = Tool(
    name="send_to_user",
    summary="Show the user a message (markdown, files, buttons or a draft); your only visible "
    "output. Buttons or a draft wait for the answer. final=true ends the turn.",
    effect="write",
    arguments=SendToUserArgs,
    run=_send_to_user,
    activity="writing to you",
    output_trust="agent",
    idempotent=True,  # delivered through the outbox, keyed by the call
)
