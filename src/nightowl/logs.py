"""Console logs that carry conversation and turn ids: readable lines for a person at a
terminal, JSON lines for log collectors."""

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

    def _entry(self, record: logging.LogRecord) -> dict[str, Any]:
        """The line's fields: time, level, logger, message, ids, extras, exception."""
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
        return entry

    def _format(self, record: logging.LogRecord) -> str:
        return json.dumps(self._entry(record), default=str)


class ConsoleFormatter(JsonFormatter):
    """One readable line per record for a person at a terminal: the local time, the level
    unless it is INFO, the message, then the ids and extra fields as key=value (scrubbed of
    secrets like the JSON lines)."""

    def _format(self, record: logging.LogRecord) -> str:
        entry = self._entry(record)
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        message, exception = entry.pop("message"), entry.pop("exception", None)
        for key in ("time", "level", "logger"):
            del entry[key]
        fields = " ".join(f"{key}={value}" for key, value in entry.items())
        level = "" if record.levelno == logging.INFO else f"{record.levelname} "
        line = f"{stamp} {level}{message}" + (f"  ({fields})" if fields else "")
        return f"{line}\n{exception}" if exception else line


# Loggers whose INFO lines say nothing a person running nightowl needs: Alembic narrates every
# migration step and plugin it loads (store/migrate.py logs one line when it migrated), httpx
# and httpcore log every request's URL, which may carry a token a tool was given, and uvicorn
# logs every request.
_QUIET = ("alembic", "httpx", "httpcore", "uvicorn.access")


def configure_logging(level: str, log_format: str = "auto") -> None:
    """Send every logger (ours, uvicorn's, DBOS's) to stderr: readable lines (`text`, or
    `auto` when stderr is a terminal) or JSON lines (`json`, or `auto` otherwise: for log
    collectors and the tests, which read the server's lines)."""
    handler = logging.StreamHandler(sys.stderr)
    readable = sys.stderr.isatty() if log_format == "auto" else log_format == "text"
    handler.setFormatter(ConsoleFormatter() if readable else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "dbos"):
        named = logging.getLogger(name)
        named.handlers[:] = []
        named.propagate = True
    # A logger's own level, not a filter: a quiet logger's INFO call returns before a record
    # is built.
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)


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
