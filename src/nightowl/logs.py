"""Structured JSON logs that carry conversation and turn ids."""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator
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

    Values registered with `redact` (the vault's secrets, as the gate loads them) never reach
    a line: the finished line is scrubbed, whatever field or traceback carried them.
    """

    def __init__(self) -> None:
        super().__init__()
        self._redacted: dict[str, str] = {}
        # What `format` scrubs, longest form first: (how the form is written, its reference),
        # as is and as it appears inside a JSON string.
        self._scrub: list[tuple[str, str]] = []

    def redact(self, forms: dict[str, str]) -> None:
        """Scrub these forms of secret values (form -> secret name) from every line."""
        new = {f: n for f, n in forms.items() if len(f) >= 4 and self._redacted.get(f) != n}
        if not new:
            return
        self._redacted.update(new)
        self._scrub = [
            (written, f"[secret:{name}]")
            for form, name in sorted(self._redacted.items(), key=lambda item: -len(item[0]))
            for written in (form, json.dumps(form)[1:-1])
        ]

    def format(self, record: logging.LogRecord) -> str:
        line = self._format(record)
        for written, reference in self._scrub:
            if written in line:
                line = line.replace(written, reference)
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


def configure_logging(level: str) -> None:
    """Send every logger (ours, uvicorn's, DBOS's) to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
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


def redact_in_logs(forms: dict[str, str]) -> None:
    """Keep these forms of secret values (form -> secret name) out of every log line."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler.formatter, JsonFormatter):
            handler.formatter.redact(forms)


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
