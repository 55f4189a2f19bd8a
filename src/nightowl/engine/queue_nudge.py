"""Wake DBOS's queue threads the moment an urgent turn is enqueued, instead of at their next poll.

DBOS dispatches queued workflows by polling (each poll of the conversation queue costs several
milliseconds of CPU, so the interval cannot shrink to nothing): an owner's message would wait
half an interval on average, and a whole idle interval after a quiet spell. DBOS has no hook to
poll now, but its queue threads sleep in `stop_event.wait(interval)` on one event of their own.
Installed before launch, this makes that event *nudgeable*: `nudge()` ends every thread's
current wait (or its next one, if it is busy polling) without signalling a stop, so it polls at
once; `set()` still stops them. The wrapping itself is engine/dbos_internals.py's (DBOS's
private internals stay there); if a DBOS release moves them, `install` reports False, dispatch
falls back to polling alone, and tests/engine/test_dbos_internals.py fails. The event's own
wake-ups use CPython's `threading.Event` internals (`_cond`, `_flag`).

The same entry point lets an API process (`--role api`) run DBOS without dispatching: it
enqueues, cancels, sends and schedules, but its queue thread returns at once, so no queue is
polled in the process that answers requests. (`DBOS.listen_queues([])` is DBOS's own switch,
but it still polls DBOS's internal queues; `DBOSClient` enqueues without a launch, but the
helpers' and routines' DBOS calls would all need a second path.) A DBOS option to launch
without the queue thread would remove this. DBOS's schedule poller is kept out of an API
process the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from nightowl.engine import dbos_internals

log = logging.getLogger(__name__)


class NudgeableEvent(threading.Event):
    """A stop event whose waiters can also be woken early, each once per nudge: every waiter,
    or only the worker thread of one queue (DBOS names it `queue-worker-<queue>`)."""

    # An event made by DBOS and re-classed: no __init__ of ours ran, hence the defaults.
    _nudges = 0

    def nudge(self, queue: str | None = None) -> None:
        """End the current (or next) wait of every thread waiting on this event, or with
        `queue` only that queue's worker thread (the other queues have nothing new to poll:
        each poll costs DBOS a transaction or two)."""
        with self._cond:  # type: ignore[attr-defined]
            if queue is None:
                self._nudges += 1
            else:
                targeted: dict[str, int] = self.__dict__.setdefault("_targeted", {})
                targeted[queue] = targeted.get(queue, 0) + 1
            self._cond.notify_all()  # type: ignore[attr-defined]

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set (True), or until a nudge for this thread it has not seen or the
        timeout (False: not a stop)."""
        me = threading.current_thread()
        queue = me.name.removeprefix(WORKER_THREAD_PREFIX) if _is_worker(me) else ""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:  # type: ignore[attr-defined]
            seen: dict[int, tuple[int, int]] = self.__dict__.setdefault("_seen", {})
            # Woken by a nudge for another queue: wait on for the rest of the timeout.
            while not self._stopped() and seen.get(me.ident or 0, (0, 0)) == self._mark(queue):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)  # type: ignore[attr-defined]
            seen[me.ident or 0] = self._mark(queue)
            return self._stopped()

    def _stopped(self) -> bool:
        return bool(self._flag)  # type: ignore[attr-defined]

    def _mark(self, queue: str) -> tuple[int, int]:
        """How many nudges a waiter of `queue` ("": not a queue's worker) has had so far."""
        return self._nudges, self.__dict__.get("_targeted", {}).get(queue, 0)


# DBOS starts one thread per queue, named after it (dbos/_queue.py `queue_thread`).
WORKER_THREAD_PREFIX = "queue-worker-"


def _is_worker(thread: threading.Thread) -> bool:
    return thread.name.startswith(WORKER_THREAD_PREFIX)


class QueueNudge:
    """The process's handle on DBOS's queue threads (one DBOS per process)."""

    def __init__(self) -> None:
        self._event: NudgeableEvent | None = None
        self.dispatch = True

    def install(self, dispatch: bool = True) -> bool:
        """Wrap DBOS's queue-thread entry point (before `DBOS.launch`); True if it could.

        With `dispatch` False the queue thread does nothing: this process dequeues no
        workflow, others (the workers) do."""
        self.dispatch = dispatch
        self._keep_schedules_to_dispatchers()
        if not dbos_internals.wrap_queue_thread(self._queue_thread):
            log.warning("DBOS has no queue_thread: queued turns start at the next poll")
            return False
        return True

    def _queue_thread(
        self, original: dbos_internals.QueueThread, stop_event: threading.Event, dbos: Any
    ) -> None:
        """DBOS's queue thread, with a nudgeable stop event (or none at all: no dispatch)."""
        if not self.dispatch:
            return
        if type(stop_event) is threading.Event:
            stop_event.__class__ = NudgeableEvent
            self._event = stop_event  # type: ignore[assignment]
        original(stop_event, dbos)

    def _keep_schedules_to_dispatchers(self) -> None:
        """DBOS's schedule poller (a thread that reads the schedules every second and starts
        a thread per schedule to enqueue its firings) runs only where turns are dispatched:
        the workers enqueue routines' firings (by deterministic workflow id, so several
        workers fire each once), and an API process polls nothing."""
        if not dbos_internals.wrap_scheduler_loop(self._scheduler_loop):
            log.warning("DBOS has no dynamic_scheduler_loop: API processes poll schedules")

    def _scheduler_loop(
        self, original: dbos_internals.SchedulerLoop, stop_event: threading.Event, interval_s: float
    ) -> None:
        if self.dispatch:
            original(stop_event, interval_s)

    @property
    def active(self) -> bool:
        """True once DBOS's queue threads run with a nudgeable event."""
        return self._event is not None

    def nudge(self, queue: str | None = None) -> None:
        """Make every queue thread poll now, or only `queue`'s."""
        if self._event is not None:
            self._event.nudge(queue)
