"""What a runtime notice is about, from the key it was delivered with (engine/turn.py and
engine/parking.py deliver them once per key): a failed turn, a stopped one, a budget stop, a
connector whose tools changed since the owner approved them (tools/mcp/provider.py), a change
to the owner's facts the memory pass did not make (memory/memory_pass.py)."""

from __future__ import annotations

NOTICE_PREFIXES = {
    "budget:": "budget_stop",
    "guard:": "stopped_turn",
    "model-error:": "failed_turn",
    "turn-error:": "failed_turn",
    "parked:": "failed_turn",
    "connector-change:": "connector_change",
    "memory-suggestion:": "memory_suggestion",
}


def notice_kind(server_key: str | None) -> str | None:
    """failed_turn | stopped_turn | budget_stop | connector_change | memory_suggestion for a
    notice, else None."""
    for prefix, kind in NOTICE_PREFIXES.items():
        if server_key and server_key.startswith(prefix):
            return kind
    return None
