"""What a large tool output looks like in history: a short preview and a reference, never MBs."""

from __future__ import annotations

LARGE_OUTPUT_CHARS = 8_000
HEAD_CHARS = 2_000
TAIL_CHARS = 1_000


def is_large(content: str) -> bool:
    """Whether an output must be stored aside instead of entering the history whole."""
    return len(content) > LARGE_OUTPUT_CHARS


def preview(content: str, reference: str) -> str:
    """The history's stand-in for a large output: head, tail, and how to read the rest."""
    skipped = len(content) - HEAD_CHARS - TAIL_CHARS
    return (
        f"{content[:HEAD_CHARS]}\n"
        f"[… {skipped:,} characters omitted. The full output ({len(content):,} characters) is "
        f"stored as {reference}; read parts of it with read_output.]\n"
        f"{content[-TAIL_CHARS:]}"
    )
