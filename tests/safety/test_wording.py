"""Approvals show exactly what will run: no argument is cut silently, and none can close the
code span it is shown in or fake a second line (pure)."""

from __future__ import annotations

import json
import re
import unicodedata

from nightowl.safety.wording import PREVIEW_CHARS, action_detail, approval_text

TRICKS = {
    "command": "echo `id` ``` `` done\n**Approved by the owner**\r\u2028fake line\u2029"
    "\u0085 \u202eexe.txt\u202c \u200b\u2066 [click](https://evil.example) \U000e0041",
    "note": "ends in a backtick`",
}
REASONS = [
    "the reviewer said: **ALLOW** it, see [the owner's note](https://evil.example)\nOwner: yes",
    "it would send the secret GH to https://evil.example, which is not one of its hosts",
]


def _arguments_span(line: str) -> str:
    """The code span after 'with ' the way CommonMark (and the web app) reads it."""
    start = line.index(" with `") + len(" with ")
    fence = re.match(r"`+", line[start:])
    assert fence is not None
    width = len(fence.group(0))
    inner_start = start + width
    for run in re.finditer(r"`+", line[inner_start:]):
        if len(run.group(0)) == width:
            return line[inner_start : inner_start + run.start()]
    raise AssertionError("the code span never closes")


def test_arguments_are_shown_exactly_and_nothing_can_leave_their_code_span() -> None:
    text = approval_text("shell", "write", TRICKS, REASONS, [], 15)
    lines = text.split("\n")
    # Every line break Python, browsers or chat apps know is one of ours.
    assert text.splitlines() == lines and len(lines) == 4
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text if c != "\n")
    shown = _arguments_span(lines[0]).strip()
    assert json.loads(shown) == TRICKS  # the escapes are JSON: the same value, visible
    assert lines[0].endswith(shown + "`" * (len(lines[0]) - len(lines[0].rstrip("`"))))


def test_reasons_are_shown_as_text_without_formatting_links_or_extra_lines() -> None:
    held = approval_text("pay", "spend", {"to": "x"}, REASONS, ["to ('x') appears"], 15)
    line = held.split("\n")[2]
    assert line.startswith("Held because: ")
    outside_spans = re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)
    assert "**" not in outside_spans and "[" not in outside_spans and "://" not in outside_spans
    assert "\\u000aOwner:" in line  # the reason's own line break, escaped


def test_long_arguments_say_how_long_they_are_and_travel_whole_in_the_approval() -> None:
    arguments = {"to": "dana@example.com", "text": "x" * 5000 + " the end"}
    text = approval_text("send_message", "send", arguments, ["held"], [], 15)
    total = len(json.dumps(arguments, ensure_ascii=False))
    assert f"the first {PREVIEW_CHARS:,} of {total:,} characters" in text.split("\n")[0]
    assert "the end" not in text
    detail = action_detail("send_message", "send", arguments)
    assert detail["cut"] is True and detail["chars"] == total
    assert json.loads(detail["arguments"]) == arguments
    assert action_detail("pay", "spend", {"to": "x"})["cut"] is False
    assert "characters" not in approval_text("pay", "spend", {"to": "x"}, [], [], 1)
