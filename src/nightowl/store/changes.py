"""Change notifications: "conversation X has something new at seq N", never the content.

Writers call `record_change` inside their transaction. On SQLite (one process) the change is
published in-process after commit; on PostgreSQL it rides `pg_notify`, which PostgreSQL
delivers after commit to every server process, so SSE clients on any process hear it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any

import psycopg
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from nightowl.store.database import Database

CHANNEL = "nightowl_changes"
# "A workflow was enqueued": an API process, which dispatches none, wakes the workers' queues.
DISPATCH_CHANNEL = "nightowl_dispatch"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Change:
    """Something new in a conversation: a message at `seq`, or a turn status change."""

    conversation_id: str
    owner_id: str
    seq: int
    # message | notify (an important message) | activity | read (the owner read up to seq)
    kind: str = "message"
    # Push deliveries were planned with it (store/push.py): the push sender looks at once.
    pushed: bool = False


def _parsed(payload: str) -> Change | None:
    """A change announced by another process, from the fields this version knows (a newer
    server in a mixed-version deploy may add some); None when it cannot be read."""
    try:
        data = json.loads(payload)
        known = {f.name for f in fields(Change)}
        return Change(**{k: v for k, v in data.items() if k in known})
    except (TypeError, ValueError, AttributeError):
        log.warning("change feed: an announcement it cannot read was skipped: %.200s", payload)
        return None


_NOTIFY = text("SELECT pg_notify(:channel, :payload)")
_NOTIFY_MANY = text("SELECT pg_notify(:channel, p) FROM unnest(CAST(:payloads AS text[])) AS p")


def record_change(session: Session, change: Change) -> None:
    """Announce `change` once the surrounding transaction commits (and never if it rolls back)."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(_NOTIFY, {"channel": CHANNEL, "payload": json.dumps(asdict(change))})
    else:
        session.info.setdefault("changes", []).append(change)


def record_changes(session: Session, changes: list[Change]) -> None:
    """`record_change` for many at once (one statement on PostgreSQL)."""
    if len(changes) == 1:
        record_change(session, changes[0])
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql" and changes:
        payloads = [json.dumps(asdict(change)) for change in changes]
        connection.execute(_NOTIFY_MANY, {"channel": CHANNEL, "payloads": payloads})
    else:
        session.info.setdefault("changes", []).extend(changes)


def announce_dispatch(database: Database) -> None:
    """Tell every process listening on PostgreSQL that something waits to be dispatched."""
    with database.write() as session:
        session.execute(_NOTIFY, {"channel": DISPATCH_CHANNEL, "payload": ""})


class Subscription:
    """One listener's queue of changes (an SSE connection's)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[Change] = asyncio.Queue(maxsize=10_000)

    def offer(self, change: Change) -> None:
        # A slow client that fills its queue loses notifications, which sync tolerates:
        # the next one it gets reveals the gap and it refetches.
        if not self.queue.full():
            self.queue.put_nowait(change)

    async def next(self, timeout: float, until: asyncio.Event | None = None) -> Change | None:
        """The next change, or None when none came within `timeout` seconds (or `until` was
        set first)."""
        get = asyncio.ensure_future(self.queue.get())
        waits: set[asyncio.Future[Any]] = {get}
        if until is not None:
            waits.add(asyncio.ensure_future(until.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if get.done() and not get.cancelled():
            return get.result()
        return None


class ChangeFeed:
    """Fans change notifications out to subscribers (SSE connections) in this process."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        # Called on the listener thread when another process announces an enqueue.
        self.on_dispatch: list[Callable[[], None]] = []
        if database.is_postgres:
            return
        event.listen(database.write_sessions, "after_commit", self._after_commit)
        event.listen(database.write_sessions, "after_rollback", self._after_rollback)

    def _after_commit(self, session: Session) -> None:
        for change in session.info.pop("changes", ()):
            self.publish(change)

    def _after_rollback(self, session: Session) -> None:
        session.info.pop("changes", None)

    def publish(self, change: Change) -> None:
        """Deliver a change to every subscriber; safe to call from any thread."""
        with self._lock:
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            try:
                subscriber.loop.call_soon_threadsafe(subscriber.offer, change)
            except RuntimeError:  # the subscriber's loop has closed
                self._discard(subscriber)

    def _discard(self, subscriber: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(subscriber)

    @contextmanager
    def subscription(self) -> Iterator[Subscription]:
        """Every change published while the block runs (leaving it needs no await, so a
        client that goes away mid-stream leaves nothing behind)."""
        subscriber = Subscription(asyncio.get_running_loop())
        with self._lock:
            self._subscribers.add(subscriber)
        try:
            yield subscriber
        finally:
            self._discard(subscriber)

    def start(self) -> None:
        """On PostgreSQL, start listening for other transactions' notifications."""
        if not self._database.is_postgres or self._listener is not None:
            return
        self._stop.clear()
        ready = threading.Event()
        self._listener = threading.Thread(
            target=self._listen, args=(ready,), name="change-feed", daemon=True
        )
        self._listener.start()
        ready.wait(timeout=10)

    def _listen(self, ready: threading.Event) -> None:
        url = self._database.engine.url.set(drivername="postgresql")
        dsn = url.render_as_string(hide_password=False)
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    if self.on_dispatch:
                        connection.execute(f"LISTEN {DISPATCH_CHANNEL}")
                    ready.set()
                    while not self._stop.is_set():
                        for note in connection.notifies(timeout=0.5):
                            if note.channel == DISPATCH_CHANNEL:
                                for wake in self.on_dispatch:
                                    wake()
                            else:
                                change = _parsed(note.payload)
                                if change is not None:
                                    self.publish(change)
            except psycopg.Error:
                log.warning("change feed lost its PostgreSQL connection; reconnecting")
                self._stop.wait(0.5)

    def stop(self) -> None:
        """Stop listening and forget every subscriber."""
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=5)
            self._listener = None
        if event.contains(self._database.write_sessions, "after_commit", self._after_commit):
            event.remove(self._database.write_sessions, "after_commit", self._after_commit)
            event.remove(self._database.write_sessions, "after_rollback", self._after_rollback)
