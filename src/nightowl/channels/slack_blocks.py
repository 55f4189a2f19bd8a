"""How an agent message looks on Slack: markdown as Slack's `mrkdwn`, and its question as
Block Kit buttons whose values are the answers they stand for.

Slack's mrkdwn is not markdown: bold is `*x*`, italics `_x_`, links `<url|text>`, no headings
and no list syntax, and `&`, `<`, `>` must be escaped as entities (else `<…>` reads as a link
or a mention). Everything the agent wrote is escaped first, so its text can never mention
`@channel` or a user by itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

SECTION_CHARS = 3000  # Slack's limit on a section block's text
MAX_SECTIONS = 45  # a message holds at most 50 blocks: the rest of a huge text is cut
MAX_BUTTONS = 25  # an actions block holds at most 25 elements
BUTTON_TEXT_CHARS = 75


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*([^*\n]+)\*\*|__([^_\n]+)__")
_ITALIC = re.compile(r"(?<![*\w])\*([^*\n]+)\*(?![*\w])")
_STRIKE = re.compile(r"~~([^~\n]+)~~")


def _inline(text: str) -> str:
    """One line's inline markdown as mrkdwn; code spans are left as they are."""
    parts = _CODE.split(text)
    out = []
    for n, part in enumerate(parts):
        if n % 2:  # inside backticks
            out.append(f"`{_escape(part)}`")
            continue
        part = _escape(part)
        part = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1)}>", part)
        part = _ITALIC.sub(r"_\1_", part)
        part = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", part)
        part = _STRIKE.sub(r"~\1~", part)
        out.append(part)
    return "".join(out)


_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^(\s*)(\d+)[.)]\s+(.*)$")
_HEADING = re.compile(r"^#{1,6}\s+(.*)$")


def markdown_mrkdwn(markdown: str) -> str:
    """Markdown (paragraphs, headings, lists, quotes, code blocks, bold, italics, code, links)
    as Slack mrkdwn, with `&`, `<`, `>` escaped."""
    out: list[str] = []
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            out.append("```")
            continue
        if in_code:
            out.append(_escape(line))
        elif quoted := re.match(r"^>\s?(.*)$", line):
            out.append(">" + _inline(quoted.group(1)))
        elif heading := _HEADING.match(line):
            out.append(f"*{_inline(heading.group(1)).strip('*')}*")
        elif bullet := _BULLET.match(line):
            out.append(f"{bullet.group(1)}\u2022 {_inline(bullet.group(2))}")
        elif numbered := _NUMBERED.match(line):
            out.append(f"{numbered.group(1)}{numbered.group(2)}. {_inline(numbered.group(3))}")
        else:
            out.append(_inline(line))
    return "\n".join(out)


def _sections(mrkdwn: str) -> list[dict[str, Any]]:
    """The text in section blocks of at most Slack's 3,000 characters, cut at line ends."""
    chunks: list[str] = []
    current = ""
    for line in mrkdwn.split("\n"):
        while len(line) > SECTION_CHARS:
            if current:
                chunks.append(current)
                current = ""
            chunks.append(line[:SECTION_CHARS])
            line = line[SECTION_CHARS:]
        if current and len(current) + 1 + len(line) > SECTION_CHARS:
            chunks.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    if current.strip():
        chunks.append(current)
    return [{"type": "section", "text": {"type": "mrkdwn", "text": c}} for c in chunks]


def _button(label: str, answer: dict[str, Any], n: int, style: str = "") -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": f"nightowl_answer_{n}",
        "text": {"type": "plain_text", "text": label[:BUTTON_TEXT_CHARS] or "?"},
        "value": json.dumps(answer),
    }
    if style:
        button["style"] = style
    return button


def message_blocks(markdown: str, meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The message's blocks: its text, a draft as a quote, and an actions block whose buttons
    carry the answer each stands for (`{"value": …}` or `{"action": "send" | "discard"}`)."""
    controls = meta.get("controls") or {}
    text = markdown.rstrip()
    if "draft" in controls:
        text += "\n\nDraft:\n" + "\n".join(f"> {ln}" for ln in str(controls["draft"]).split("\n"))
    blocks = _sections(markdown_mrkdwn(text))
    if len(blocks) > MAX_SECTIONS:
        cut = {"type": "section", "text": {"type": "mrkdwn", "text": "_(cut: too long for Slack)_"}}
        blocks = [*blocks[: MAX_SECTIONS - 1], cut]
    buttons = [b for b in controls.get("buttons") or [] if isinstance(b, dict)]
    elements: list[dict[str, Any]] = []
    if buttons:
        elements = [
            _button(str(b.get("label", "")), {"value": b.get("value")}, n)
            for n, b in enumerate(buttons[:MAX_BUTTONS])
        ]
    elif "draft" in controls:
        elements = [
            _button("Send", {"action": "send"}, 0, "primary"),
            _button("Discard", {"action": "discard"}, 1, "danger"),
        ]
    if elements:
        blocks.append({"type": "actions", "block_id": "nightowl_answer", "elements": elements})
    return blocks
