"""Cache warming: while the owner types, repeat the conversation's prefix to the provider so
the reply finds it cached, at most once per cache lifetime.

Best effort and not durable: a warming lost to a crash costs nothing but a cold cache.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from nightowl.engine.model_calls import fail_model_call, record_outcome
from nightowl.harness.pins import pinned_request
from nightowl.harness.prompt import SYSTEM_PROMPT
from nightowl.harness.sections import request_sections
from nightowl.harness.transcript import Entry
from nightowl.models.base import Model, ModelReply, ModelRequest, ToolSpec
from nightowl.models.pricing import PriceTable
from nightowl.store.database import Database
from nightowl.store.tables import PromptPinRow, utcnow
from nightowl.store.transcript import find_pin, load_transcript, start_model_call
from nightowl.store.warming import claim_warming

log = logging.getLogger(__name__)


@dataclass
class CacheWarmer:
    """Warms a conversation's provider cache on request (the owner is typing)."""

    database: Database
    model: Model | None
    summaries: list[tuple[str, str]]
    specs: dict[str, ToolSpec]
    prices: PriceTable
    cache_lifetime_s: float
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def claim(self, conversation_id: str) -> bool:
        """Whether to warm now (blocking; run it in a thread): not when the cache is warm
        already (a model call or a warming within the cache lifetime) or nothing was ever
        sent (no prefix to warm). A claim is recorded, so it holds for one cache lifetime."""
        if self.model is None:
            return False
        with self.database.write() as session:
            if session.get(PromptPinRow, conversation_id) is None:
                return False
            return claim_warming(session, conversation_id, utcnow(), self.cache_lifetime_s)

    def start(self, conversation_id: str) -> None:
        """Warm in the background (call on the event loop, after a successful claim)."""
        task = asyncio.get_running_loop().create_task(self._warm(conversation_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _prepare(self, conversation_id: str) -> tuple[ModelRequest, str] | None:
        assert self.model is not None
        with self.database.write() as session:
            pin = find_pin(session, conversation_id)
            if pin is None:
                return None
            history = [Entry.from_dict(p) for p in load_transcript(session, conversation_id)]
            record = start_model_call(session, conversation_id, "warm", 0, self.model.name)
        now = utcnow().strftime("%Y-%m-%d %H:%M UTC")
        request = pinned_request(
            pin, SYSTEM_PROMPT, self.summaries, self.specs, history, f"Current time: {now}."
        )
        return replace(request, purpose="warm", max_output_tokens=1), record

    async def _warm(self, conversation_id: str) -> None:
        assert self.model is not None
        try:
            prepared = await asyncio.to_thread(self._prepare, conversation_id)
            if prepared is None:
                return
            request, record = prepared
            try:
                reply = await self.model.complete(request)
            except Exception as error:
                await asyncio.to_thread(fail_model_call, self.database, record, repr(error))
                raise
            sections = [list(s) for s in request_sections(request)]
            await asyncio.to_thread(self._save, conversation_id, record, reply, sections)
        except Exception as error:
            log.warning("cache warming failed", extra={"error": repr(error)[:300]})

    def _save(
        self, conversation_id: str, record: str, reply: ModelReply, sections: list[list[Any]]
    ) -> None:
        assert self.model is not None
        with self.database.write() as session:
            record_outcome(
                session,
                conversation_id=conversation_id,
                record=record,
                model_name=self.model.name,
                reply=reply,
                sections=sections,
                prices=self.prices,
                cache_lifetime_s=self.cache_lifetime_s,
            )
