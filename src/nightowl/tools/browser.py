"""Browser tools: open a page, read it (accessibility snapshot, then text, then a screenshot),
act on it by element reference (pixels as the last resort). What a page says is untrusted data.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from nightowl.computer.browser import Browsers, BrowserSession, playwright_error
from nightowl.computer.browser_relay import BrowserError
from nightowl.computer.protocol import Computer
from nightowl.computer.sandbox import HOME_INSIDE, SandboxError
from nightowl.tools.registry import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from playwright.async_api import Page

MAX_CHARS = 12_000
SETTLE_TIMEOUT_MS = 10_000
SCHEMES = ("http", "https", "file", "about")
SCREENSHOTS_INSIDE = f"{HOME_INSIDE}/.browser/screenshots"
FRESH_REFS = "Call browser_read for fresh references, then try again (or another element)."
BAD_URL = "Check the URL; the computer's network policy may not reach it. Try another source."


class BrowserOpenArgs(BaseModel):
    """Arguments of browser_open."""

    url: str = Field(max_length=2_000, description="An http(s) URL (or file:///home/agent/…).")


class BrowserReadArgs(BaseModel):
    """Arguments of browser_read."""

    mode: Literal["snapshot", "text", "screenshot"] = Field(
        default="snapshot",
        description="snapshot: elements with [ref=…] to act on (try first); text: the page's "
        "visible text; screenshot: a PNG saved in the home (only when the others fall short).",
    )
    offset: int = Field(default=0, ge=0, description="First character (snapshot and text).")


class BrowserActArgs(BaseModel):
    """Arguments of browser_act."""

    action: Literal["click", "fill", "select", "press"]
    ref: str | None = Field(
        default=None, max_length=20, description="Element reference from the snapshot (e12)."
    )
    value: str | None = Field(
        default=None,
        max_length=10_000,
        description="fill: the text; select: the option's label or value; press: a key (Enter).",
    )
    x: float | None = Field(default=None, description="Pixel click only, when no ref works.")
    y: float | None = Field(default=None, description="Pixel click only, when no ref works.")
    origin: str | None = Field(
        default=None,
        max_length=300,
        description="The page you expect to act on, as https://host; refused if the page is "
        "elsewhere. Give it when value uses a secret ({{secret:NAME}}).",
    )


class BrowserScreenshotArgs(BaseModel):
    """Arguments of browser_screenshot."""

    full_page: bool = Field(default=False, description="The whole page, not only the view.")


Runner = Callable[[BrowserSession], Awaitable[ToolResult]]


async def _with_browser(
    browsers: Browsers, ctx: ToolContext, work: Runner, hint: str = FRESH_REFS
) -> ToolResult:
    """Run `work` on the owner's browser, one call at a time, with errors the agent can use."""
    try:
        sandbox = await ctx.sandbox()  # in this process, or on a computer host
        # Each agent (conversation) has its own tab; the profile (logins) is the user's.
        return await browsers.use(ctx.owner_id, sandbox, work, agent=ctx.conversation_id)
    except SandboxError as error:
        return ToolResult(f"The computer is unavailable ({error}); the browser needs it.", True)
    except BrowserError as error:
        return ToolResult(f"Browser problem: {error}.", True)
    except playwright_error() as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else "failed"
        return ToolResult(f"The browser action failed ({first_line}). {hint}", True)


async def _settle(page: Page) -> None:
    """Let a navigation an action started finish before reading the page again."""
    await asyncio.sleep(0.2)
    with contextlib.suppress(playwright_error()):
        await page.wait_for_load_state("load", timeout=SETTLE_TIMEOUT_MS)


async def _snapshot(page: Page) -> str:
    for attempt in range(3):
        try:
            return await page.aria_snapshot(mode="ai")
        except playwright_error():
            if attempt == 2:
                raise
            await _settle(page)  # the page navigated while we looked
    return ""


def _window(text: str, offset: int) -> str:
    part = text[offset : offset + MAX_CHARS]
    end = offset + len(part)
    if end < len(text):
        return f"{part}\n[characters {offset}-{end} of {len(text)}; next: offset={end}]"
    return part if offset == 0 else f"[characters {offset}-{end} of {len(text)}]\n{part}"


async def _page_header(page: Page) -> str:
    return f"Page: {await page.title()!r} at {page.url}"


async def _read_snapshot(session: BrowserSession, offset: int = 0) -> ToolResult:
    page = session.current_page()
    snapshot = await _snapshot(page)
    return ToolResult(
        f"{await _page_header(page)}\n"
        f"Accessibility snapshot (act on elements with browser_act and their ref):\n"
        f"{_window(snapshot, offset) if snapshot.strip() else '(the page is empty)'}",
        meta={"untrusted": True},
    )


async def write_inside(sandbox: Computer, path: str, content: bytes) -> None:
    """Write a file as the computer's user, from inside (root never writes into the home)."""
    result = await sandbox.write_bytes(path, content)
    if result.exit_code != 0:
        raise BrowserError(f"could not save {path} in the computer (exit {result.exit_code})")


async def _screenshot_result(session: BrowserSession, full_page: bool) -> ToolResult:
    """A PNG of the page saved in the home; the result names the file, never holds it."""
    png = await session.current_page().screenshot(type="png", full_page=full_page)
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.png"
    path = f"{SCREENSHOTS_INSIDE}/{name}"
    await write_inside(session.sandbox, path, png)
    return ToolResult(
        f"{await _page_header(session.current_page())}\nSaved a screenshot to {path}. "
        "Prefer browser_read with mode=snapshot for finding elements; click by pixels only "
        "when no ref works.",
        meta={"file": path},
    )


def browser_tools(browsers: Browsers) -> list[Tool]:
    """The browser tools, all driving the owner's browser in their computer."""

    async def open_page(args: BrowserOpenArgs, ctx: ToolContext) -> ToolResult:
        scheme = urlsplit(args.url).scheme
        if scheme not in SCHEMES:
            return ToolResult("Open an http(s) URL (or file:///home/agent/… for a file).", True)

        async def work(session: BrowserSession) -> ToolResult:
            page = session.current_page()
            response = await page.goto(args.url, wait_until="load")
            status = f"HTTP {response.status}. " if response is not None else ""
            result = await _read_snapshot(session)
            return ToolResult(status + result.content, meta=result.meta)

        return await _with_browser(browsers, ctx, work, BAD_URL)

    async def read_page(args: BrowserReadArgs, ctx: ToolContext) -> ToolResult:
        async def work(session: BrowserSession) -> ToolResult:
            if args.mode == "screenshot":
                return await _screenshot_result(session, full_page=False)
            if args.mode == "snapshot":
                return await _read_snapshot(session, args.offset)
            page = session.current_page()
            text = await page.locator("body").inner_text()
            return ToolResult(
                f"{await _page_header(page)}\n{_window(text, args.offset)}",
                meta={"untrusted": True},
            )

        return await _with_browser(browsers, ctx, work)

    async def act(args: BrowserActArgs, ctx: ToolContext) -> ToolResult:
        problem = _act_problem(args)
        if problem:
            return ToolResult(problem, True)

        async def work(session: BrowserSession) -> ToolResult:
            page = session.current_page()
            if args.origin is not None and not same_origin(page.url, args.origin):
                return ToolResult(
                    f"Not done: the page is {page.url[:200]}, not on {args.origin}. Open the "
                    "page you meant first (a secret goes only where it was meant to go).",
                    True,
                )
            ref = _clean_ref(args.ref)
            target = page.locator(f"aria-ref={ref}") if ref else None
            if target is not None and await target.count() == 0:
                return ToolResult(
                    f"No element {ref} on the page now (refs change when the page does). "
                    "Call browser_read for a fresh snapshot and use a ref from it.",
                    True,
                )
            if args.action == "click" and target is None:
                await page.mouse.click(float(args.x or 0), float(args.y or 0))
            elif args.action == "click" and target is not None:
                await target.click()
            elif args.action == "fill" and target is not None:
                await target.fill(args.value or "")
            elif args.action == "select" and target is not None:
                await target.select_option(args.value or "")
            elif target is not None:
                await target.press(args.value or "")
            else:
                await page.keyboard.press(args.value or "")
            await _settle(page)
            result = await _read_snapshot(session)
            done = f"Done: {args.action} {args.ref or f'at ({args.x}, {args.y})'}."
            return ToolResult(f"{done}\n{result.content}", meta=result.meta)

        return await _with_browser(browsers, ctx, work)

    async def screenshot(args: BrowserScreenshotArgs, ctx: ToolContext) -> ToolResult:
        return await _with_browser(
            browsers, ctx, lambda session: _screenshot_result(session, args.full_page)
        )

    return [
        Tool(
            name="browser_open",
            summary="Open a URL in your browser (logins persist); returns its element snapshot.",
            effect="read",
            arguments=BrowserOpenArgs,
            run=open_page,
            activity="browsing the web",
            uses_secrets=True,
        ),
        Tool(
            name="browser_read",
            summary="Read the open page: element snapshot with refs, its text, or a screenshot.",
            effect="read",
            arguments=BrowserReadArgs,
            run=read_page,
            activity="reading a web page",
        ),
        Tool(
            name="browser_act",
            summary="Click, fill, select or press on a page element by its snapshot ref.",
            effect="write",
            arguments=BrowserActArgs,
            run=act,
            activity="using a web page",
            uses_secrets=True,  # typed into the page at `origin`, checked before it acts
        ),
        Tool(
            name="browser_screenshot",
            summary="Save a screenshot of the open page to a file in your home.",
            effect="read",
            arguments=BrowserScreenshotArgs,
            run=screenshot,
            activity="looking at a web page",
        ),
    ]


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"https": 443, "http": 80}.get(scheme)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").rstrip("."), port


def same_origin(url: str, origin: str) -> bool:
    """Whether the page at `url` is on `origin` (scheme, host and port)."""
    page, expected = _origin(url), _origin(origin)
    return bool(expected[1]) and page == expected


def _clean_ref(ref: str | None) -> str | None:
    """`e12` from what an agent may copy out of a snapshot (`[ref=e12]`, `ref=e12`)."""
    if ref is None:
        return None
    return ref.strip().strip("[]").removeprefix("ref=").strip()


def _act_problem(args: BrowserActArgs) -> str | None:
    """Why these act arguments cannot work (None when they can)."""
    if args.ref is not None and not args.ref.strip():
        return "ref is empty; use a ref like e12 from browser_read."
    if args.action == "click" and args.ref is None and (args.x is None or args.y is None):
        return "Give the ref of the element to click (from browser_read), or both x and y."
    if args.action in ("fill", "select") and args.ref is None:
        return f"{args.action} needs the ref of the field (from browser_read)."
    if args.action in ("fill", "select", "press") and args.value is None:
        what = {"fill": "the text", "select": "the option", "press": "the key, e.g. Enter"}
        return f"{args.action} needs a value: {what[args.action]}."
    return None
