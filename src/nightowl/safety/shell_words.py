"""A shell command split into words, the way /bin/sh would, when it is plain enough (pure).

Only commands without anything the shell would compute are split: no `;`, `&`, redirections,
subshells, `$` or backtick expansions, globs, comments or line breaks. A pipe separates
segments. Whatever else a command holds is named in `problem`, and nothing is concluded
from its words.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_OPERATORS = set(";&<>()`$")
_GLOBS = set("*?[")
_BREAKS = set("\n\r\x0b\x0c\x85\u2028\u2029")


@dataclass(frozen=True)
class ShellWords:
    """A command's pipeline: the words of each segment, quotes removed; or the problem."""

    segments: list[list[str]] = field(default_factory=list)
    problem: str = ""


def _plain(problem: str) -> ShellWords:
    return ShellWords([], problem)


def split_shell(command: str) -> ShellWords:
    """The command's words per pipeline segment, or why it is not a plain command."""
    segments: list[list[str]] = [[]]
    word: list[str] = []
    started = False
    quote = ""
    index = 0

    def end_word() -> None:
        nonlocal word, started
        if started:
            segments[-1].append("".join(word))
        word, started = [], False

    while index < len(command):
        char = command[index]
        index += 1
        if char in _BREAKS:
            return _plain("the command spans more than one line")
        if quote == "'":
            if char == "'":
                quote = ""
            else:
                word.append(char)
        elif quote == '"':
            if char == '"':
                quote = ""
            elif char in "$`":
                return _plain(f"the command expands {char!r} inside double quotes")
            elif char == "\\" and index < len(command) and command[index] in '"\\$`':
                word.append(command[index])
                index += 1
            else:
                word.append(char)
        elif char in " \t":
            end_word()
        elif char in "'\"":
            quote, started = char, True
        elif char == "\\":
            if index >= len(command):
                return _plain("the command ends in a backslash")
            word.append(command[index])
            index += 1
            started = True
        elif char == "|":
            if command[index : index + 1] == "|":
                return _plain("the command has '||' (more than one command)")
            end_word()
            segments.append([])
        elif char in _OPERATORS:
            return _plain(
                f"the command has {char!r} outside quotes (more commands, a redirection or an "
                "expansion)"
            )
        elif char in _GLOBS:
            return _plain(f"the command has the file pattern {char!r} outside quotes")
        elif char == "#" and not started:
            return _plain("the command has a comment")
        else:
            word.append(char)
            started = True
    if quote:
        return _plain("the command has an unclosed quote")
    end_word()
    if any(not segment for segment in segments):
        return _plain("the command has an empty pipeline segment")
    return ShellWords(segments)
