"""Which shell commands only read: the ones a turn that read outside text may run unasked.

In a tainted turn a shell command could be an attacker's: it may delete or overwrite files,
kill processes, change permissions, or reach the network (the sandbox may have egress, and any
program can open a socket). What is certain not to is a short list of read-only programs,
joined by pipes or `;`/`&&`/`||`, with no substitution, no redirection into a file and no
option that writes or runs something else. Everything else is held for the owner (pure).
"""

from __future__ import annotations

import shlex

READ_ONLY = frozenset(
    {
        "basename", "cat", "cmp", "column", "cut", "date", "df", "diff", "dirname", "du",
        "echo", "egrep", "false", "fgrep", "file", "grep", "head", "id", "jq", "ls",
        "md5sum", "nl", "printf", "pwd", "realpath", "rg", "sha1sum", "sha256sum", "sort",
        "stat", "tail", "tr", "tree", "true", "uname", "uniq", "wc", "whoami", "find", "git",
        "cd", "test", "[",
    }
)  # fmt: skip
# Read-only git subcommands (others write, or reach the network: clone, fetch, push, pull).
GIT_READS = frozenset({"status", "log", "diff", "show", "ls-files", "blame", "rev-parse"})
# Options that make an otherwise read-only program write or run something.
WRITING_OPTIONS = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprintf", "-fls"),
    "sort": ("-o", "--output"),
    "tree": ("-o",),
    "rg": ("--pre",),
    "git": ("-c", "--output", "--ext-diff", "--textconv"),
}
SEPARATORS = frozenset({"|", ";", "&&", "||"})
SUBSTITUTIONS = ("$(", "`", "<(", ">(")


def read_only(command: str) -> bool:
    """True only for a command certain to read and print, never to write, kill or connect."""
    if any(mark in command for mark in SUBSTITUTIONS) or "\n" in command:
        return False
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: not something we can judge
        return False
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token in SEPARATORS:
            if words and not _reads(words):
                return False
            words = []
        elif set(token) <= set("<>&|;()"):
            return False  # redirection, background, subshell: not a plain read
        else:
            words.append(token)
    return bool(tokens)


def _reads(words: list[str]) -> bool:
    program = words[0].rsplit("/", 1)[-1]
    if "=" in words[0] or program not in READ_ONLY:
        return False  # an assignment (`X=1 cmd`), or a program that may write
    banned = WRITING_OPTIONS.get(program, ())
    if any(word == option or word.startswith(option + "=") for word in words for option in banned):
        return False
    if program == "git":
        subcommands = [w for w in words[1:] if not w.startswith("-")]
        return bool(subcommands) and subcommands[0] in GIT_READS
    return True
