"""Running turns of this process, so the owner's correction can cut one off in milliseconds.

DBOS cancels a workflow durably (it will not resume after a restart) but notices it inside a
running step only about once a second. For a turn running in this process we also cancel its
task directly, which interrupts the in-flight model or tool call at once.
"""

from __future__ import annotations

import asyncio
import threading


class RunningTurns:
    """turn id → the asyncio task running it (only turns of this process)."""

    def __init__(self) -> None:
        self._tasks: dict[str, tuple[asyncio.Task[object], asyncio.AbstractEventLoop]] = {}
        self._lock = threading.Lock()
        # Set as the process stops (a deploy, SIGTERM): the turns it cancels then were not
        # cut off by anyone, they resume on the next start or on another worker.
        self.closing = False

    def enter(self, turn_id: str) -> None:
        """Called by the turn workflow as it starts running."""
        task = asyncio.current_task()
        if task is not None:
            with self._lock:
                self._tasks[turn_id] = (task, asyncio.get_running_loop())

    def leave(self, turn_id: str) -> None:
        """Called by the turn workflow as it stops, however it stops."""
        with self._lock:
            self._tasks.pop(turn_id, None)

    def cancel(self, turn_id: str) -> bool:
        """Interrupt the turn if it runs here; True when it did."""
        with self._lock:
            found = self._tasks.get(turn_id)
        if found is None:
            return False
        task, loop = found
        loop.call_soon_threadsafe(task.cancel)
        return True
