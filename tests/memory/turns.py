"""Shared by the memory tests that run real turns through a server."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.store_view import rows
from tests.fake_providers import openai_reply


def final_reply(text: str) -> dict[str, Any]:
    """A provider reply that sends `text` to the user and ends the turn."""
    return openai_reply(tool=("send_to_user", json.dumps({"text": text, "final": True})))


def remembered(url: str, conversation: str, turns: int = 1) -> bool:
    """The conversation's turns are done, and so are their memory passes (which run after)."""
    found = rows(url, "SELECT status FROM turns WHERE conversation_id = :c", c=conversation)
    passes = rows(
        url, "SELECT turn_id FROM memory_passes WHERE conversation_id = :c", c=conversation
    )
    return found == [("done",)] * turns and len(passes) == turns
