"""Structured JSON logs that carry conversation and turn ids."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

conversation_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "conversation_id", default=None
)
turn_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("turn_id", default=None)

_STANDARD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, ids, and any `extra` fields.

    Secrets registered with `redact` (the vault's, as the gate opens them) never reach a line:
    the finished line is scrubbed of every form of them (safety/redaction.py), whatever
    field or traceback carried them.
    """

    def __init__(self) -> None:
        super().__init__()
        # One scrubber per owner, replaced when the owner's secrets are opened again.
        self._scrubbers: dict[str, Callable[[str], str]] = {}

    def redact(self, key: str, scrub: Callable[[str], str]) -> None:
        """Scrub every line with `scrub` (an owner's secrets), in place of the last one
        registered under `key`."""
        self._scrubbers = {**self._scrubbers, key: scrub}

    def format(self, record: logging.LogRecord) -> str:
        line = self._format(record)
        for scrub in self._scrubbers.values():
            line = scrub(line)
        return line

    def _format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        conversation_id = getattr(record, "conversation_id", None) or conversation_id_var.get()
        turn_id = getattr(record, "turn_id", None) or turn_id_var.get()
        if conversation_id:
            entry["conversation_id"] = conversation_id
        if turn_id:
            entry["turn_id"] = turn_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and key not in entry and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class ConsoleFormatter(JsonFormatter):
    """One readable line per record for a person at a terminal: time, level, message, then
    the ids and extra fields as key=value (scrubbed of secrets like the JSON lines)."""

    def _format(self, record: logging.LogRecord) -> str:
        entry = json.loads(super()._format(record))
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        level, message = entry.pop("level"), entry.pop("message")
        for key in ("time", "logger", "exception"):
            entry.pop(key, None)
        fields = " ".join(f"{key}={value}" for key, value in entry.items())
        line = f"{stamp} {level:<7} {message}" + (f"  ({fields})" if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str, human: bool | None = None) -> None:
    """Send every logger (ours, uvicorn's, DBOS's) to stderr: readable lines when stderr is a
    terminal (or `human`), JSON lines otherwise (for log collectors)."""
    handler = logging.StreamHandler(sys.stderr)
    readable = sys.stderr.isatty() if human is None else human
    handler.setFormatter(ConsoleFormatter() if readable else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "dbos"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # They log every request's URL, which may carry a token a tool was given.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


def redact_in_logs(key: str, scrub: Callable[[str], str]) -> None:
    """Keep what `scrub` removes (an owner's secrets, registered under `key`) out of every
    log line."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):
            handler.formatter.redact(key, scrub)


@contextmanager
def log_context(conversation_id: str | None = None, turn_id: str | None = None) -> Iterator[None]:
    """Tag every log line written inside the block with these ids."""
    tokens = []
    if conversation_id is not None:
        tokens.append((conversation_id_var, conversation_id_var.set(conversation_id)))
    if turn_id is not None:
        tokens.append((turn_id_var, turn_id_var.set(turn_id)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)
