"""Cache warming: while the owner types, repeat the conversation's prefix to the provider so
the reply finds it cached, at most once per cache lifetime; and, for the local model, evaluate
the prefix of the owner's next new conversation when the server starts.

Best effort and not durable: a warming lost to a crash costs nothing but a cold cache.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from nightowl.engine.model_calls import CallPlace, ModelCalls
from nightowl.harness.pins import pin_now, pinned_request
from nightowl.harness.prompt import instructions_for
from nightowl.memory.context import current_profile
from nightowl.messages import ModelRequest, ToolSpec
from nightowl.models.base import Model
from nightowl.store.database import Database
from nightowl.store.tables import utcnow
from nightowl.store.transcript import find_pin, has_pin, load_transcript, start_model_call
from nightowl.store.users import ensure_owner
from nightowl.store.warming import claim_warming, newest_conversation_id
from nightowl.tools.providers import Toolbox

log = logging.getLogger(__name__)


@dataclass
class CacheWarmer:
    """Warms a conversation's provider cache on request (the owner is typing)."""

    database: Database
    model: Model | None
    summaries: list[tuple[str, str]]
    specs: dict[str, ToolSpec]
    calls: ModelCalls
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def claim(self, conversation_id: str) -> bool:
        """Whether to warm now (blocking; run it in a thread): not when the cache is warm
        already (a model call or a warming within the cache lifetime) or nothing was ever
        sent (no prefix to warm). A claim is recorded, so it holds for one cache lifetime."""
        if self.model is None:
            return False
        with self.database.write() as session:
            if not has_pin(session, conversation_id):
                return False
            return claim_warming(session, conversation_id, utcnow(), self.calls.cache_lifetime_s)

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
            history = load_transcript(session, conversation_id)
            record = start_model_call(session, conversation_id, "warm", 0, self.model.name)
        now = utcnow().strftime("%Y-%m-%d %H:%M UTC")
        request = pinned_request(
            pin,
            instructions_for(self.model),
            self.summaries,
            self.specs,
            history,
            f"Current time: {now}.",
        )
        return replace(request, purpose="warm", max_output_tokens=1), record

    async def _warm(self, conversation_id: str) -> None:
        assert self.model is not None
        try:
            prepared = await asyncio.to_thread(self._prepare, conversation_id)
            if prepared is None:
                return
            request, record = prepared
            place = CallPlace(conversation_id, "warm", 0, record)
            await self.calls.call(self.model, request, place)
        except Exception as error:
            log.warning("cache warming failed", extra={"error": repr(error)[:300]})


def new_conversation_request(
    database: Database, toolbox: Toolbox, instructions: str
) -> ModelRequest:
    """The prefix the owner's next new conversation will pin (instructions, their tools and
    memory section), as a request with no messages; blocking (run it in a thread)."""
    with database.write() as session:
        owner = ensure_owner(session).id
        latest = newest_conversation_id(session, owner)
        # A conversation's tools are the owner's (their connectors): the newest shows them.
        tools = toolbox.for_conversation(session, latest) if latest else toolbox.builtin
        memory = current_profile(session, owner)
    summaries, specs, groups = tools.summaries(), tools.specs(), tools.groups()
    pin = pin_now(instructions, summaries, specs, groups=groups, profile=memory)
    request = pinned_request(pin, instructions, summaries, specs, [], "", groups)
    return replace(request, purpose="warm", max_output_tokens=0)


async def warm_new_conversations(
    database: Database, model: Model, toolbox: Toolbox, instructions: str
) -> None:
    """Evaluate the prefix of the owner's next new conversation ahead of its first message
    (for a model that saves prefix states: the local one; a provider's cache would expire
    and cost money). Best effort: a failure costs only a slower first reply."""
    if not getattr(model, "keeps_prefix_states", False):
        return
    try:
        request = await asyncio.to_thread(new_conversation_request, database, toolbox, instructions)
        await model.complete(request)
    except Exception as error:
        log.warning(
            "warming a new conversation's prefix failed", extra={"error": repr(error)[:300]}
        )
