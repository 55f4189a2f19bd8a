"""Console logs: readable lines for a person at a terminal, JSON lines for collectors, both
scrubbed of registered secrets."""

from __future__ import annotations

import json
import logging

from nightowl.logs import ConsoleFormatter, JsonFormatter


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("nightowl.app", logging.INFO, __file__, 1, message, None, None)
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
    assert "info" in line and "turn finished with [secret]" in line
    assert "conversation_id=conv_1" in line and "outcome=done" in line
    entry = json.loads(machine.format(record))
    assert entry["message"] == "turn finished with [secret]" and entry["outcome"] == "done"
