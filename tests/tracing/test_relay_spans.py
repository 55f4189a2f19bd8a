"""A channel's delivery attempts are spans (over the real store, with the relay tests'
in-memory channel): one per attempt, with the delivery's ids and whether it landed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nightowl.store.database import Database
from tests.channels.test_relay import MemoryChannel, _make_due, _relay, _say, _setup


def test_each_delivery_attempt_is_a_span_saying_whether_it_landed(
    database: Database, tmp_path: Path
) -> None:
    channel_id, conversation = _setup(database)
    channel = MemoryChannel()
    relay = _relay(database, channel_id, channel, tmp_path)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The relay takes the global tracer; this test gives it its own provider's instead.
    relay._tracer = provider.get_tracer("test")
    message = _say(database, conversation, "the answer")
    channel.down = True
    asyncio.run(relay.run_once())
    channel.down = False
    _make_due(database)
    asyncio.run(relay.run_once())
    failed, landed = exporter.get_finished_spans()
    assert failed.name == landed.name == "nightowl.channel.deliver"
    assert failed.attributes is not None and landed.attributes is not None
    assert failed.attributes["nightowl.delivered"] is False
    assert landed.attributes["nightowl.delivered"] is True
    assert (failed.attributes["nightowl.attempt"], landed.attributes["nightowl.attempt"]) == (1, 2)
    assert landed.attributes["nightowl.message_id"] == message
    assert landed.attributes["nightowl.channel_id"] == channel_id
    assert "the answer" not in str(landed.attributes)
