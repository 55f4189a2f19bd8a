"""What the safety gate reads beyond the history the model sees: outside text whole (a large
output is only a preview in the history; the rest is in the blob store), and whether a
write_file call would replace a file the agent did not make in this turn."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path, PurePosixPath

from nightowl.harness.transcript import OUTSIDE_TRUST, outside_texts
from nightowl.messages import Entry, ToolCall
from nightowl.store.blobs import get_text
from nightowl.store.errors import NotFound

MAX_OUTPUT_BYTES = 8 * 1024 * 1024  # a shell output file is read up to this much


def whole_outside_texts(
    history: Sequence[Entry], blob_dir: Path | None, home: Path | None = None
) -> list[str]:
    """Every outside text in the context, large outputs read whole: from the blob store, and
    a shell command's full output from its file in the home."""
    texts = outside_texts(history)
    for entry in history:
        if entry.trust not in OUTSIDE_TRUST:
            continue
        reference = entry.meta.get("blob")
        if reference and blob_dir is not None:
            with suppress(NotFound):
                texts.append(get_text(blob_dir, str(reference)))
        output = entry.meta.get("output_file")
        if output and home is not None:
            texts.append(_read_in_home(home, str(output)))
    return texts


def _read_in_home(home: Path, relative: str) -> str:
    path = (home / relative).resolve()
    try:
        path.relative_to(home.resolve())
        with path.open("rb") as file:
            return file.read(MAX_OUTPUT_BYTES).decode("utf-8", "replace")
    except (ValueError, OSError):
        return ""  # gone, or not in the home: the excerpt in the history is what is left


def _home_path(path: str) -> str:
    """A file path relative to the home, normalised ("~/a/./b" and "a/b" are the same)."""
    trimmed = path.strip().removeprefix("~").lstrip("/")
    trimmed = trimmed.removeprefix("home/agent/")
    return str(PurePosixPath(trimmed))


def files_written(turn_entries: Sequence[Entry]) -> set[str]:
    """The files this turn's write_file calls wrote so far (home-relative): calls with a
    result that is not an error (the call under review has none yet)."""
    calls: dict[str, ToolCall] = {}
    written: set[str] = set()
    for entry in turn_entries:
        for made in entry.tool_calls:
            calls[made.id] = made
        call = calls.get(entry.call_id) if entry.kind == "tool_result" else None
        if call is not None and call.name == "write_file" and not entry.is_error:
            written.add(_home_path(str(call.arguments.get("path", ""))))
    return written


def replaces_file(call: ToolCall, home: Path | None, made: set[str]) -> bool:
    """Whether a write_file call replaces a file that exists and that this turn did not
    make. When the home is not on disk (asleep as a snapshot), assume it does."""
    if call.name != "write_file" or call.arguments.get("append"):
        return False
    path = _home_path(str(call.arguments.get("path", "")))
    if path in made:
        return False
    if home is None or not home.is_dir():
        return True
    target = (home / path).resolve()
    try:
        target.relative_to(home.resolve())
    except ValueError:
        return True  # outside the home: the file tool refuses it anyway; hold when unsure
    return target.exists()
