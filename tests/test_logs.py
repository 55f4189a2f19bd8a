"""Console logs: readable lines for a person at a terminal, JSON lines for collectors, both
scrubbed of registered secrets."""

from __future__ import annotations

import json
import logging

from nightowl.logs import ConsoleFormatter, JsonFormatter


def _record(message: str, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("nightowl.app", level, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_terminal_gets_readable_lines_and_a_collector_json_with_secrets_scrubbed() -> None:
    record = _record("turn finished with hunter2", conversation_id="conv_1", outcome="done")
    readable, machine = ConsoleFormatter(), JsonFormatter()
    for formatter in (readable, machine):
        formatter.redact("owner", lambda line: line.replace("hunter2", "[secret]"))
    line = readable.format(record)
    assert not line.startswith("{") and "\n" not in line
    # The time, then the message: INFO is the usual level, not worth a word on every line.
    assert line[8:] == " turn finished with [secret]  (conversation_id=conv_1 outcome=done)"
    assert "info" not in line.casefold()
    warning = readable.format(_record("the model is slow", logging.WARNING))
    assert warning[8:] == " WARNING the model is slow"
    entry = json.loads(machine.format(record))
    assert entry["message"] == "turn finished with [secret]" and entry["outcome"] == "done"
