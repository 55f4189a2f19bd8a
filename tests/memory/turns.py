"""Shared by the memory tests that run real turns through a server."""

from __future__ import annotations

import json
from typing import Any

from nightowl.engine.model_calls import CallPlace, ModelCalls
from nightowl.memory.memory_pass import MEMORY_STEP, run_memory_pass
from nightowl.metrics import Metrics
from nightowl.models.base import Model
from nightowl.models.pricing import PriceTable
from nightowl.store.database import Database
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


async def pass_of(
    database: Database,
    model: Model,
    turn_id: str,
    conversation_id: str,
    owner_id: str,
    use_model: bool = True,
    prices: PriceTable | None = None,
) -> dict[str, Any]:
    """The memory pass of a turn, its model calls recorded as the engine records them."""
    calls = ModelCalls(database, Metrics(), prices or PriceTable(), 300.0)
    complete = calls.caller(model, CallPlace(conversation_id, turn_id, MEMORY_STEP))
    return await run_memory_pass(
        database, model.name, complete, turn_id, conversation_id, owner_id, use_model
    )
