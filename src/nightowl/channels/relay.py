"""The outbound relay: every agent message reaches each channel its conversation is bound to,
exactly once.

A delivery record per (message, channel) is planned in the same transaction that moves the
binding's mark, so no message is planned twice or skipped. An attempt claims the record for a
while (a lease); a relay that dies mid-send leaves the lease to lapse and the next attempt
first asks the channel whether the message landed (Matrix: the room's recent events; e-mail:
the mailbox, by Message-ID) before sending again; a channel that cannot tell (Telegram) sends
again with a line saying it may be a repeat. Errors and rate limits are retried with
backoff for as long as it takes: a channel that is down loses nothing. A database that is
down while an attempt's outcome is recorded is waited for (store/outages.py): a message
that landed is recorded as sent, not left to be sent again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from opentelemetry import trace

from nightowl.channels.base import Channel, ChannelError, Delivered, Outbound
from nightowl.channels.render import message_text
from nightowl.store.blobs import file_path
from nightowl.store.channel_alerts import bind_for_alerts
from nightowl.store.channels import (
    DueDelivery,
    claim_due,
    mark_retry,
    mark_sent,
    plan_deliveries,
    release,
    remember_refs,
    set_status,
    update_address,
)
from nightowl.store.database import Database
from nightowl.store.outages import outlast
from nightowl.store.tables import utcnow

log = logging.getLogger(__name__)

# Said on a message sent again after a crash mid-send, on a channel that cannot check whether
# the first attempt landed (Telegram): a repeat is possible, and the owner is told so.
MAYBE_REPEAT = "(Sent again after a restart: you may have this message already.)\n\n"


def backoff_s(attempts: int, cap_s: float) -> float:
    """Seconds before the next attempt: 1, 2, 4 … up to `cap_s`."""
    return float(min(cap_s, 2 ** max(0, attempts - 1)))


class OutboundRelay:
    """Plans and makes deliveries for the channels running in this process."""

    def __init__(
        self,
        database: Database,
        channels: Callable[[], dict[str, Channel]],
        blob_dir: Path,
        web_link: Callable[[str], str | None],
        *,
        lease_s: float = 60.0,
        max_backoff_s: float = 60.0,
    ) -> None:
        self._database = database
        self._channels = channels
        self._blob_dir = blob_dir
        self._web_link = web_link
        self._lease_s = lease_s
        self._max_backoff_s = max_backoff_s
        # The global tracer: a no-op unless tracing/export.py installed a provider.
        self._tracer = trace.get_tracer(__name__)

    async def run_once(self) -> int:
        """Plan what is new, make every due delivery; how many were attempted."""
        channels = self._channels()
        due = await asyncio.to_thread(self._plan_and_claim, list(channels))
        threads: dict[str, list[DueDelivery]] = {}
        for delivery in due:
            threads.setdefault(delivery.binding_id, []).append(delivery)
        # Threads side by side; within a thread, in order, and nothing overtakes a failure.
        await asyncio.gather(*(self._in_order(channels, t) for t in threads.values()))
        return len(due)

    async def _in_order(self, channels: dict[str, Channel], thread: list[DueDelivery]) -> None:
        for n, delivery in enumerate(thread):
            if not await self._attempt(channels, delivery):
                rest = [d.id for d in thread[n + 1 :]]
                if rest:
                    await outlast(self._release, rest)
                return

    def _release(self, delivery_ids: list[str]) -> None:
        with self._database.write() as session:
            release(session, delivery_ids)

    def _plan_and_claim(self, channel_ids: list[str]) -> list[DueDelivery]:
        with self._database.write() as session:
            bind_for_alerts(session)
            plan_deliveries(session)
        with self._database.write() as session:
            return claim_due(session, channel_ids, self._lease_s)

    def _outbound(self, due: DueDelivery, reactions: bool = False) -> Outbound:
        files = []
        for item in due.meta.get("files") or []:
            try:
                data = file_path(self._blob_dir, item["blob"]).read_bytes()
            except (OSError, KeyError, ValueError):
                continue
            files.append((str(item.get("name", "file")), str(item.get("content_type", "")), data))
        return Outbound(
            message_id=due.message_id,
            conversation_id=due.conversation_id,
            text=message_text(
                due.body, due.meta, self._web_link(due.conversation_id), reactions=reactions
            ),
            markdown=due.body,
            meta=due.meta,
            address=due.address,
            files=files,
        )

    async def _attempt(self, channels: dict[str, Channel], due: DueDelivery) -> bool:
        """One attempt, traced; whether the message is on the channel now."""
        with self._tracer.start_as_current_span("nightowl.channel.deliver") as span:
            if span.is_recording():
                span.set_attributes(
                    {
                        "nightowl.channel_id": due.channel_id,
                        "nightowl.delivery_id": due.id,
                        "nightowl.message_id": due.message_id,
                        "gen_ai.conversation.id": due.conversation_id,
                        "nightowl.attempt": due.attempts,
                    }
                )
            landed = await self._attempt_once(channels, due)
            if span.is_recording():
                span.set_attribute("nightowl.delivered", landed)
            return landed

    async def _attempt_once(self, channels: dict[str, Channel], due: DueDelivery) -> bool:
        channel = channels.get(due.channel_id)
        if channel is None:  # stopped meanwhile: the claim lapses and it is tried again
            return False
        outbound = await asyncio.to_thread(self._outbound, due, channel.capabilities.reactions)
        try:
            found: Delivered | None = None
            if due.attempts > 1 and channel.capabilities.check_before_retry:
                # An earlier attempt may have landed before its outcome was recorded.
                found = await channel.find_delivered(outbound)
            elif due.uncertain:
                log.warning(
                    "channel delivery may repeat",
                    extra={"conversation_id": due.conversation_id, "delivery": due.id},
                )
                outbound = dataclasses.replace(outbound, text=MAYBE_REPEAT + outbound.text)
            delivered = found or await channel.deliver(outbound)
        except ChannelError as error:
            failure = (str(error), error.retry_after, error.permanent)
        except Exception as error:  # a channel's bug or an unexpected failure: retried later
            failure = (f"{type(error).__name__}: {error}", None, False)
        else:
            await outlast(self._sent, due, delivered)
            return True
        await outlast(self._failed, due, *failure)
        return False

    def _sent(self, due: DueDelivery, delivered: Delivered) -> None:
        with self._database.write() as session:
            mark_sent(session, due.id, delivered.external_id)
            update_address(session, due.binding_id, delivered.address)
            if delivered.external_id:
                remember_refs(session, due.channel_id, due.conversation_id, [delivered.external_id])
            set_status(session, due.channel_id, "ok")
        log.info(
            "channel delivery sent",
            extra={
                "conversation_id": due.conversation_id,
                "delivery": due.id,
                "attempt": due.attempts,
            },
        )

    def _failed(
        self, due: DueDelivery, error: str, retry_after: float | None, permanent: bool
    ) -> None:
        retry_at = None
        if not permanent:
            wait = (
                retry_after
                if retry_after is not None
                else backoff_s(due.attempts, self._max_backoff_s)
            )
            retry_at = utcnow() + timedelta(seconds=wait)
        with self._database.write() as session:
            mark_retry(session, due.id, error, retry_at)
            set_status(session, due.channel_id, "failed", error)
        log.warning(
            "channel delivery failed",
            extra={
                "conversation_id": due.conversation_id,
                "delivery": due.id,
                "attempt": due.attempts,
                "permanent": permanent,
            },
        )
