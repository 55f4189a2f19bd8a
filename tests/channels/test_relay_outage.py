"""The relay and a database outage (PostgreSQL made unreachable for this test only, through a
proxy): a message that reached the channel just as the database went away is recorded as
sent once the database is back, not sent a second time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest
from sqlalchemy import update

from nightowl.channels.base import Capabilities, Delivered, Outbound
from nightowl.store.channel_tables import ChannelDelivery
from nightowl.store.channels import deliveries_of
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.tables import utcnow
from tests.channels.test_relay import MemoryChannel, _relay, _say, _setup
from tests.databases import fresh_database
from tests.pg_proxy import PostgresProxy, postgres_proxy, restore_after


class CutAfterSending(MemoryChannel):
    """A channel that cannot tell whether a message landed (as Telegram): the database goes
    away right after its first delivery."""

    capabilities: ClassVar[Capabilities] = Capabilities(check_before_retry=False)

    def __init__(self, proxy: PostgresProxy) -> None:
        super().__init__()
        self.proxy = proxy

    async def deliver(self, outbound: Outbound) -> Delivered:
        delivered = await super().deliver(outbound)
        if len(self.shown) == 1:
            self.proxy.cut()
            restore_after(self.proxy, 1.5)
        return delivered


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as made:
        database = Database(made)
        upgrade(database)
        database.dispose()
        yield made


def test_a_delivery_recorded_during_an_outage_is_not_sent_again(url: str, tmp_path: Path) -> None:
    with postgres_proxy() as proxy:
        database = Database(proxy.url(url))
        try:
            channel_id, conversation = _setup(database)
            message = _say(database, conversation, "an answer")
            channel = CutAfterSending(proxy)
            relay = _relay(database, channel_id, channel, tmp_path)  # type: ignore[arg-type]
            assert asyncio.run(relay.run_once()) == 1
            with database.write() as session:  # the claim's lease over: due again if unsent
                session.execute(
                    update(ChannelDelivery).values(
                        next_at=utcnow() - timedelta(seconds=1),
                        lease_until=utcnow() - timedelta(seconds=1),
                    )
                )
            asyncio.run(relay.run_once())
            with database.read() as session:
                recorded = deliveries_of(session, message)
        finally:
            database.dispose()
    assert [o.text for o in channel.shown] == [channel.shown[0].text]  # sent once, no repeat
    assert recorded == [(channel_id, "sent", 1, f"ext-{message}")]
