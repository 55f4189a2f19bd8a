"""Desktop tools: look at the agent's virtual display and click, type and press keys on it.

Each agent (conversation) has its own 1280x800 display in its owner's sandbox (run by this
process, or by the computer's host on a computer tier). Screenshots go to files in the home
(the result gives the path, never the image). While the owner has taken
control of the display (to type a code, solve a check), input waits until they give it back.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from nightowl.computer.desktop import (
    HEIGHT,
    KEEP_SCREENSHOTS,
    SCREENS_INSIDE,
    WIDTH,
    DesktopError,
    Desktops,
    XRun,
)
from nightowl.computer.remote_desktop import RemoteDesktops
from nightowl.computer.sandbox import SandboxError
from nightowl.tools.registry import Tool, ToolContext, ToolResult

MAX_TYPE_CHARS = 2000
TYPE_DELAY_MS = 12
MAX_KEY_COMBOS = 20
BUTTONS = {"left": "1", "middle": "2", "right": "3", "wheel_up": "4", "wheel_down": "5"}
_KEY_COMBO = re.compile(r"^[A-Za-z0-9_]{1,32}(\+[A-Za-z0-9_]{1,32}){0,4}$")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# The displays: in this process, or on the computer tier's hosts.
AnyDesktops = Desktops | RemoteDesktops
KEY_EXAMPLES = "Return, Tab, Escape, BackSpace, Delete, Page_Down, F5, ctrl+s, alt+F4, shift+Tab"


class ScreenshotArgs(BaseModel):
    """Arguments of desktop_screenshot (none)."""


class ClickArgs(BaseModel):
    """Arguments of desktop_click."""

    x: int = Field(ge=0, le=WIDTH - 1, description=f"Pixels from the left, 0-{WIDTH - 1}.")
    y: int = Field(ge=0, le=HEIGHT - 1, description=f"Pixels from the top, 0-{HEIGHT - 1}.")
    button: Literal["left", "middle", "right", "wheel_up", "wheel_down"] = "left"
    clicks: int = Field(default=1, ge=1, le=3, description="2 for a double click.")


class TypeArgs(BaseModel):
    """Arguments of desktop_type."""

    text: str = Field(
        min_length=1,
        max_length=MAX_TYPE_CHARS,
        description="Text typed into the focused window; a newline presses Return.",
    )

    @field_validator("text")
    @classmethod
    def _printable(cls, text: str) -> str:
        if _CONTROL_CHARS.search(text):
            raise ValueError(
                "text holds control characters; type plain text (newlines and tabs are fine) "
                "and press keys such as Escape or ctrl+c with desktop_key"
            )
        return text


class KeyArgs(BaseModel):
    """Arguments of desktop_key."""

    keys: str = Field(
        min_length=1,
        max_length=400,
        description=f"Keys pressed in order, separated by spaces, e.g. {KEY_EXAMPLES}.",
    )

    @field_validator("keys")
    @classmethod
    def _key_names(cls, keys: str) -> str:
        combos = keys.split()
        if not combos or len(combos) > MAX_KEY_COMBOS:
            raise ValueError(f"give 1-{MAX_KEY_COMBOS} keys separated by spaces")
        for combo in combos:
            if not _KEY_COMBO.match(combo):
                raise ValueError(
                    f"{combo!r} is not a key name; use X key names joined by + for "
                    f"modifiers (write 'plus', 'minus', 'space' for those characters), "
                    f"e.g. {KEY_EXAMPLES}"
                )
        return " ".join(combos)


async def _run_x(
    desktops: AnyDesktops,
    ctx: ToolContext,
    argv: list[str],
    *,
    timeout_s: float = 30.0,
    as_input: bool = False,
) -> XRun | ToolResult:
    """Run an X program on the agent's display: in this process, or on the computer's host."""
    try:
        sandbox = await ctx.sandbox()
        return await desktops.run_x(
            ctx.owner_id,
            ctx.conversation_id,
            sandbox,
            argv,
            timeout_s=timeout_s,
            as_input=as_input,
        )
    except (SandboxError, DesktopError) as error:
        return ToolResult(f"The desktop is not available: {error}. Try again.", is_error=True)


def _screenshot(
    desktops: AnyDesktops,
) -> Callable[[ScreenshotArgs, ToolContext], Awaitable[ToolResult]]:
    async def run(_args: ScreenshotArgs, ctx: ToolContext) -> ToolResult:
        agent = re.sub(r"[^A-Za-z0-9_-]", "", ctx.conversation_id)[:40] or "agent"
        stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{int(time.time() * 1000) % 1000:03d}"
        name = f"{agent}-{stamp}.png"
        # Save, say its size, and keep only the newest screenshots of the folder.
        script = (
            'mkdir -p "$1" && import -window root "$1/$2" && identify -format "%w %h %B" "$1/$2" '
            f'&& cd "$1" && ls -1t | tail -n +{KEEP_SCREENSHOTS + 1} | xargs -r rm -f --'
        )
        ran = await _run_x(desktops, ctx, ["sh", "-c", script, "sh", SCREENS_INSIDE, name])
        if isinstance(ran, ToolResult):
            return ran
        done = ran.captured
        assert done is not None  # looking is never held back
        facts = re.fullmatch(r"(\d+) (\d+) (\d+)", done.output)
        if done.exit_code != 0 or facts is None:
            return ToolResult(f"The screenshot failed: {done.output}. Try again.", is_error=True)
        width, height, size = (int(n) for n in facts.groups())
        note = ""
        if ran.owner_control:
            note = (
                " The owner has control of the display right now; wait before clicking or typing."
            )
        return ToolResult(
            f"Screenshot saved to {SCREENS_INSIDE}/{name} ({width}x{height} PNG, "
            f"{size // 1024 + 1} KB).{note}",
            meta={"file": f"{SCREENS_INSIDE}/{name}", "width": width, "height": height},
        )

    return run


def _click(desktops: AnyDesktops) -> Callable[[ClickArgs, ToolContext], Awaitable[ToolResult]]:
    async def run(args: ClickArgs, ctx: ToolContext) -> ToolResult:
        argv = ["xdotool", "mousemove", str(args.x), str(args.y)]
        argv += ["click", "--repeat", str(args.clicks), BUTTONS[args.button]]
        done = f"{args.button} click at ({args.x}, {args.y})"
        return await _input(desktops, ctx, argv, done)

    return run


def _type(desktops: AnyDesktops) -> Callable[[TypeArgs, ToolContext], Awaitable[ToolResult]]:
    async def run(args: TypeArgs, ctx: ToolContext) -> ToolResult:
        argv = ["xdotool", "type", "--delay", str(TYPE_DELAY_MS), "--", args.text]
        timeout = 15.0 + len(args.text) * TYPE_DELAY_MS * 3 / 1000
        return await _input(desktops, ctx, argv, f"typed {len(args.text)} characters", timeout)

    return run


def _key(desktops: AnyDesktops) -> Callable[[KeyArgs, ToolContext], Awaitable[ToolResult]]:
    async def run(args: KeyArgs, ctx: ToolContext) -> ToolResult:
        argv = ["xdotool", "key", "--delay", "30", "--", *args.keys.split()]
        return await _input(desktops, ctx, argv, f"pressed {args.keys}")

    return run


async def _input(
    desktops: AnyDesktops, ctx: ToolContext, argv: list[str], done: str, timeout_s: float = 15.0
) -> ToolResult:
    ran = await _run_x(desktops, ctx, argv, timeout_s=timeout_s, as_input=True)
    if isinstance(ran, ToolResult):
        return ran
    result = ran.captured
    if result is None:
        return ToolResult(
            "The owner has control of the display (for example to type a code or solve a "
            "check) and has not given it back yet. Wait a while, then take a screenshot and "
            "try again; do not work around it.",
            is_error=True,
        )
    unknown = re.findall(r"No such key name '([^']*)'", result.output)
    if unknown:
        return ToolResult(
            f"Unknown key name {unknown[0]!r}: it was skipped (the other keys were pressed). "
            f"Use X key names such as {KEY_EXAMPLES}.",
            is_error=True,
        )
    if result.exit_code is None:
        return ToolResult("The input took too long and was stopped; try less at once.", True)
    if result.exit_code != 0:
        return ToolResult(f"xdotool failed: {result.output or result.exit_code}.", True)
    return ToolResult(
        f"Done: {done}. Take a screenshot to see the effect (programs may need a moment)."
    )


def desktop_tools(desktops: AnyDesktops) -> list[Tool]:
    """The four desktop tools, bound to the server's displays (or its computer hosts')."""
    return [
        Tool(
            name="desktop_screenshot",
            summary=f"Save a screenshot of your {WIDTH}x{HEIGHT} virtual desktop to a PNG file.",
            effect="read",
            arguments=ScreenshotArgs,
            run=_screenshot(desktops),
            activity="looking at the desktop",
        ),
        Tool(
            name="desktop_click",
            summary="Click at pixel (x, y) on your virtual desktop (left/middle/right/wheel).",
            effect="write",
            arguments=ClickArgs,
            run=_click(desktops),
            activity="using the desktop",
        ),
        Tool(
            name="desktop_type",
            summary="Type text into the focused window of your virtual desktop.",
            effect="write",
            arguments=TypeArgs,
            run=_type(desktops),
            activity="typing on the desktop",
            uses_secrets=True,  # held for the owner when the computer can reach the network
        ),
        Tool(
            name="desktop_key",
            summary="Press keys or shortcuts on your virtual desktop (Return, ctrl+s, alt+F4).",
            effect="write",
            arguments=KeyArgs,
            run=_key(desktops),
            activity="using the desktop",
        ),
    ]
