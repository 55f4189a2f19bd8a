"""How an agent message looks on a channel: its markdown, its question as plain reply
instructions (or buttons where the channel has them), a link to the web app; and a small,
safe markdown → HTML for channels that show HTML (everything is escaped first)."""

from __future__ import annotations

import html
import re
from typing import Any

from nightowl.store.questions import KEYCAPS


def message_text(
    body: str, meta: dict[str, Any], web_link: str | None, *, reactions: bool = False
) -> str:
    """The message as markdown for a text channel, with how to answer its question (by a
    reply, or by a reaction where the channel has them: store/questions.py)."""
    parts = [body.rstrip()]
    controls = meta.get("controls") or {}
    buttons = controls.get("buttons") or []
    if buttons:
        choices = " / ".join(f"**{b['label']}**" for b in buttons)
        parts.append(f"Reply with one of: {choices}")
        if reactions:
            keys = ", ".join(f"{KEYCAPS[n]} {b['label']}" for n, b in enumerate(buttons))
            parts.append(f"Or react: {keys}")
    elif "draft" in controls:
        parts.append("Draft:\n\n> " + "\n> ".join(str(controls["draft"]).splitlines()))
        parts.append("Reply **send** to send it as it is, or **discard**.")
        if reactions:
            parts.append("Or react \u2705 to send it, \u274c to discard it.")
    names = [f["name"] for f in meta.get("files") or [] if isinstance(f, dict)]
    if names:
        parts.append("Attached: " + ", ".join(names))
    if web_link and (buttons or "draft" in controls):
        parts.append(f"Or answer in the web app: {web_link}")
    return "\n\n".join(p for p in parts if p)


_INLINE = [
    (re.compile(r"`([^`\n]+)`"), r"<code>\1</code>"),
    (re.compile(r"\*\*([^*\n]+)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![*\w])\*([^*\n]+)\*(?!\w)"), r"<em>\1</em>"),
    (re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)"), r'<a href="\2">\1</a>'),
]


def _inline(text: str) -> str:
    text = html.escape(text, quote=True)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text


def code_fence(lines: list[str], start: int) -> tuple[list[str], int]:
    """The lines inside the code block whose opening fence (```) is `lines[start]`, and the
    index of the line after its closing fence (past the end when it is never closed)."""
    body = []
    i = start + 1
    while i < len(lines) and not lines[i].startswith("```"):
        body.append(lines[i])
        i += 1
    return body, i + 1


def markdown_html(markdown: str) -> str:
    """Markdown (paragraphs, lists, code blocks, quotes, bold, italics, code, links) as HTML."""
    out: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            block, i = code_fence(lines, i)
            out.append("<pre><code>" + html.escape("\n".join(block)) + "</code></pre>")
            continue
        if re.match(r"^\s*([-*]|\d+\.)\s+", line):
            ordered = bool(re.match(r"^\s*\d+\.", line))
            items = []
            while i < len(lines) and re.match(r"^\s*([-*]|\d+\.)\s+", lines[i]):
                items.append(re.sub(r"^\s*([-*]|\d+\.)\s+", "", lines[i]))
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>" + "".join(f"<li>{_inline(t)}</li>" for t in items) + f"</{tag}>")
            continue
        if line.startswith(">"):
            quoted = []
            while i < len(lines) and lines[i].startswith(">"):
                quoted.append(lines[i][1:].lstrip())
                i += 1
            out.append("<blockquote>" + "<br>".join(_inline(q) for q in quoted) + "</blockquote>")
            continue
        if not line.strip():
            i += 1
            continue
        paragraph = []
        while (
            i < len(lines)
            and lines[i].strip()
            and not re.match(r"^(```|>|\s*([-*]|\d+\.)\s)", lines[i])
        ):
            paragraph.append(lines[i])
            i += 1
        out.append("<p>" + "<br>".join(_inline(p) for p in paragraph) + "</p>")
    return "".join(out)
