"""Group commit: concurrent callers' items written together, one transaction per batch.

Each caller submits its item and waits. The first caller of an idle batcher leads: it takes
every waiting item (up to `max_batch`), runs them as one batch, hands each caller its result,
and passes the lead to the next waiting caller. Under load a batch holds many items (one
transaction, one commit, no lock handovers between them); alone, a caller runs its own item
at once, with no added delay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Waiting(Generic[Item, Result]):
    __slots__ = ("error", "finished", "item", "result", "wake")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.wake = threading.Event()
        self.finished = False
        self.result: Result | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[Item, Result]):
    """Runs submitted items in batches through `run_batch` (which answers each item)."""

    def __init__(
        self,
        run_batch: Callable[[Sequence[Item]], list[Result | BaseException]],
        max_batch: int = 64,
    ) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._waiting: list[_Waiting[Item, Result]] = []
        self._leading = False

    def submit(self, item: Item) -> Result:
        """Run `item` (in some batch) and return its result, or raise its error."""
        mine: _Waiting[Item, Result] = _Waiting(item)
        with self._lock:
            self._waiting.append(mine)
            lead = not self._leading
            self._leading = True
        if not lead:
            mine.wake.wait()  # finished by a leader, or handed the lead
        if not mine.finished:
            self._lead()
        if mine.error is not None:
            raise mine.error
        return mine.result  # type: ignore[return-value]

    def _lead(self) -> None:
        # The leader's own item is first in line, so it is in this batch.
        with self._lock:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
        try:
            outcomes = self._run_batch([w.item for w in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"{len(outcomes)} results for a batch of {len(batch)}")
        except BaseException as failure:
            outcomes = [failure] * len(batch)
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                waiting.error = outcome
            else:
                waiting.result = outcome
            waiting.finished = True
            waiting.wake.set()
        with self._lock:
            successor = self._waiting[0] if self._waiting else None
            if successor is None:
                self._leading = False
        if successor is not None:
            successor.wake.set()  # not finished: it leads the next batch
