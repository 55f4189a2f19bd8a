"""Group commit: concurrent callers share transactions, each gets its own answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from nightowl.router.group_commit import GroupCommit
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import create_conversation, messages_after
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.turns import TurnInfo
from nightowl.store.users import ensure_owner


def test_concurrent_callers_are_batched_and_each_gets_its_own_result() -> None:
    sizes: list[int] = []
    running = threading.Lock()

    def run(items: Sequence[int]) -> list[int | BaseException]:
        assert running.acquire(blocking=False), "two batches ran at once"
        try:
            sizes.append(len(items))
            time.sleep(0.01)  # a transaction's worth of work
            return [ValueError(f"odd {i}") if i % 7 == 3 else i * 10 for i in items]
        finally:
            running.release()

    batcher: GroupCommit[int, int] = GroupCommit(run, max_batch=16)

    def call(i: int) -> int | str:
        try:
            return batcher.submit(i)
        except ValueError as error:
            return str(error)

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(call, range(200)))
    assert results == [f"odd {i}" if i % 7 == 3 else i * 10 for i in range(200)]
    assert sum(sizes) == 200
    assert max(sizes) > 1 and max(sizes) <= 16
    assert batcher.submit(5) == 50  # alone: runs at once, no leader left behind


def test_a_failing_batch_fails_every_caller_with_its_error() -> None:
    def run(items: Sequence[int]) -> list[int | BaseException]:
        raise RuntimeError("store is down")

    batcher: GroupCommit[int, int] = GroupCommit(run)
    with pytest.raises(RuntimeError, match="store is down"):
        batcher.submit(1)
    with pytest.raises(RuntimeError, match="store is down"):
        batcher.submit(2)


class _Queue:
    def __init__(self) -> None:
        self.woken: list[str] = []

    def wake(self, turn: TurnInfo, delay_s: float = 0.0) -> None:
        self.woken.append(turn.conversation_id)

    def preempt(self, turn_ids: list[str]) -> None:
        pass


def test_a_bad_trigger_in_a_batch_fails_alone(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session).id
        conversation = create_conversation(session, owner, kind="group").id
    queue = _Queue()
    router = Router(database, queue, batch_window_s=1.0)

    def incoming(n: int, conversation_id: str) -> IncomingMessage:
        return IncomingMessage(
            source="webhook",
            idempotency_key=f"e{n % 30}",  # every key three or four times
            conversation_id=conversation_id,
            text=f"event {n % 30}",
            trust="untrusted",
            priority=Priority.WEBHOOK,
        )

    def deliver(n: int) -> str:
        target = "conv_missing" if n % 50 == 7 else conversation
        try:
            accepted = router.accept(incoming(n, target))
        except NotFound:
            return "not found"
        return accepted.message.body

    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(deliver, range(100)))
    assert results.count("not found") <= 2
    for n, result in enumerate(results):
        assert result in (f"event {n % 30}", "not found")
    with database.read() as session:
        stored = messages_after(session, conversation, 0)
    assert sorted(m.body for m in stored) == sorted(f"event {n}" for n in range(30))
    assert [m.seq for m in stored] == list(range(1, 31))
    assert queue.woken == [conversation]  # one turn takes the whole storm
