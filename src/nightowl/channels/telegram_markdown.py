"""The agent's markdown as Telegram MarkdownV2 (https://core.telegram.org/bots/api#markdownv2-style),
in messages of at most 4096 characters.

MarkdownV2 refuses a whole message ("can't parse entities") for one unescaped character of
`_*[]()~`>#+-=|{}.!` or `\\`, so everything is escaped first and only the constructs the agent
writes (bold, italics, inline code, code blocks, links, lists, quotes, headings) become
entities. Inside code only ` and \\ are escaped; inside a link's URL only ) and \\.
"""

from __future__ import annotations

import re

from nightowl.channels.render import code_fence

MAX_CHARS = 4096
_SPECIAL = re.compile(r"([_*\[\]()~`>#+\-=|{}.!\\])")
_INLINE = re.compile(
    r"`(?P<code>[^`\n]+)`"
    r"|\*\*(?P<bold>[^*\n]+?)\*\*"
    r"|(?<![*\w])\*(?P<star>[^*\n]+?)\*(?!\w)"
    r"|(?<![_\w])_(?P<under>[^_\n]+?)_(?!\w)"
    r"|\[(?P<label>[^\]\n]+)\]\((?P<url>https?://(?:[^()\s]|\([^()\s]*\))+)\)"
)
# Escaping at most doubles a character: a cut this long always fits a message.
_PLAIN_CUT = 2000
_LIST = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+(.*)$")


def escape(text: str) -> str:
    """Plain text: every special character escaped."""
    return _SPECIAL.sub(r"\\\1", text)


def _escape_code(text: str) -> str:
    return text.replace("\\", "\\\\").replace("`", "\\`")


def _escape_url(url: str) -> str:
    return url.replace("\\", "\\\\").replace(")", "\\)")


def inline(text: str) -> str:
    """One line's inline markdown as MarkdownV2."""
    out = []
    at = 0
    for found in _INLINE.finditer(text):
        out.append(escape(text[at : found.start()]))
        at = found.end()
        if found["code"] is not None:
            out.append(f"`{_escape_code(found['code'])}`")
        elif found["bold"] is not None:
            out.append(f"*{escape(found['bold'])}*")
        elif found["star"] is not None or found["under"] is not None:
            out.append(f"_{escape(found['star'] or found['under'])}_")
        else:
            out.append(f"[{escape(found['label'])}]({_escape_url(found['url'])})")
    out.append(escape(text[at:]))
    return "".join(out)


def blocks(markdown: str) -> list[str]:
    """The message as MarkdownV2 blocks (paragraph lines, list items, quotes, code blocks),
    each whole: a message is split only between blocks."""
    found: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            language = re.sub(r"[^\w+-]", "", line[3:].strip())
            body, i = code_fence(lines, i)
            found.extend(_code_blocks(language, body))
            continue
        i += 1
        if (heading := re.match(r"^#{1,6}\s+(.*)$", line)) is not None:
            found.append(f"*{escape(heading[1])}*")
        elif (item := _LIST.match(line)) is not None:
            indent, mark, rest = item.groups()
            bullet = escape(mark) if mark[0].isdigit() else "•"
            found.append(f"{'  ' * (len(indent) // 2)}{bullet} {inline(rest)}")
        elif line.startswith(">"):
            found.append(">" + inline(line[1:].lstrip()))
        else:
            found.append(inline(line))
        if len(found[-1]) > MAX_CHARS:  # one huge line: plain text, cut where it is safe
            found[-1:] = [escape(line[n : n + _PLAIN_CUT]) for n in range(0, len(line), _PLAIN_CUT)]
    return found


def _code_blocks(language: str, body: list[str]) -> list[str]:
    """A code block, cut into blocks that each fit a message (each closed and reopened)."""
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for line in body:
        for n in range(0, max(len(line), 1), _PLAIN_CUT):
            escaped = _escape_code(line[n : n + _PLAIN_CUT])
            if current and size + len(escaped) + 1 > MAX_CHARS - 40:
                pieces.append("\n".join(current))
                current, size = [], 0
            current.append(escaped)
            size += len(escaped) + 1
    pieces.append("\n".join(current))
    return [f"```{language}\n{piece}\n```" for piece in pieces]


def messages(markdown: str) -> list[str]:
    """The markdown as MarkdownV2 messages of at most 4096 characters each (Telegram counts
    the parsed text; the source with its escapes is longer, so this stays well inside)."""
    out: list[str] = []
    current = ""
    for block in blocks(markdown):
        joined = f"{current}\n{block}" if current else block
        if len(joined) > MAX_CHARS:
            out.append(current)
            joined = block
        current = joined
    if current.strip():
        out.append(current)
    return [m for m in out if m.strip()] or [escape("(empty message)")]
