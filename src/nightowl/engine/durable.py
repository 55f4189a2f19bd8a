"""DBOS, configured from the settings: the durable history, the conversation queue, recovery."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSConfig, PropagateOtelContext, SetEnqueueOptions, SetWorkflowID
from opentelemetry import context as otel_context
from sqlalchemy import Engine, create_engine, event

from nightowl.config import Settings
from nightowl.engine import dbos_internals
from nightowl.engine.preemption import RunningTurns
from nightowl.engine.queue_nudge import QueueNudge
from nightowl.engine.timers import TIMER_QUEUE, TimerWorkflow
from nightowl.router.router import HelperStopper
from nightowl.store.turns import TurnInfo

log = logging.getLogger(__name__)

# How long a workflow claimed by this worker may go unstarted before it is started again.
STRANDED_GRACE_S = 10.0

CONVERSATION_QUEUE = "nightowl-conversations"
COMPACTION_QUEUE = "nightowl-compactions"
TurnWorkflow = Callable[[str], Coroutine[Any, Any, str]]


def _sqlite_history_engine(url: str) -> Engine:
    """DBOS's SQLite history in WAL mode: DBOS's own default (a rollback journal with a full
    sync per commit) costs ~10 ms a step here; WAL with NORMAL sync survives any process crash
    and halves it. Writers still take the lock at BEGIN, as DBOS expects."""
    Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = "IMMEDIATE"
        dbapi_connection.execute("PRAGMA journal_mode=WAL")
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        dbapi_connection.execute("PRAGMA busy_timeout=30000")
        dbapi_connection.execute("PRAGMA foreign_keys=ON")

    return engine


class _NoLogExportNotice(logging.Filter):
    """Drops DBOS's warning that its OTLP *log* export has no provider: nightowl turns on
    DBOS's OpenTelemetry for its spans only (logs stay on stderr), so the warning would
    mislead every start. Matched by its text: if DBOS rewords it, it shows again, harmlessly."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "logger provider not set" not in record.getMessage()


def dbos_config(settings: Settings) -> DBOSConfig:
    """DBOS settings: history beside the app store, a pinned version, this worker's id."""
    config: DBOSConfig = {
        "name": "nightowl",
        "system_database_url": settings.system_database_url,
        "application_version": settings.application_version,
        "executor_id": settings.worker_id,
        "notification_listener_polling_interval_sec": settings.notification_polling_interval_s,
        "log_level": "WARNING",
        # New or changed routine schedules are picked up within a second.
        "scheduler_polling_interval_sec": 1.0,
    }
    if settings.otlp_endpoint:
        # DBOS's workflow and step spans, through the provider tracing/export.py installed
        # globally (no endpoints of DBOS's own: one exporter for both).
        config["enable_otlp"] = True
        config["otel_attribute_format"] = "semconv"
    if not settings.uses_postgres:
        config["system_database_engine"] = _sqlite_history_engine(settings.system_database_url)
    return config


class DurableEngine:
    """Owns the DBOS instance of this process and the per-conversation turn queue."""

    def __init__(self, settings: Settings, wake_workers: Callable[[], None] | None = None) -> None:
        self._settings = settings
        self._queue: Any = None
        self._turn: TurnWorkflow | None = None
        self._timer: TimerWorkflow | None = None
        self._timer_queue: Any = None
        self._compaction: Callable[[str, str], Coroutine[Any, Any, str]] | None = None
        self._compaction_queue: Any = None
        self._waker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wake")
        self.running = RunningTurns()
        self._fast = True  # the conversation queue's pace (engine launched: active)
        self._last_activity = 0.0  # when a turn was last enqueued (time.monotonic())
        self._nudge = QueueNudge()
        self._stranded: dict[str, float] = {}  # workflow id -> when first seen not running
        # An API process dispatches nothing: it enqueues, and the workers dequeue.
        self.dispatches = settings.role != "api"
        # Before launch: DBOS's queue threads get a nudgeable event (or, in an API process,
        # do not run at all).
        self._nudge.install(dispatch=self.dispatches)
        # How an enqueue made here reaches the processes that dispatch (PostgreSQL): an API
        # process has no queue thread of its own to nudge.
        self.wake_workers: Callable[[], None] = wake_workers or (lambda: None)
        self._helpers: HelperStopper | None = None
        dbos_log = logging.getLogger("dbos")
        # A clean registry for this process's workflows. DBOS says "successfully shut down"
        # even when nothing ran yet: not a line for a starting server's console.
        level = dbos_log.level
        dbos_log.setLevel(logging.WARNING)
        try:
            DBOS.destroy(destroy_registry=True)
        finally:
            dbos_log.setLevel(level)
        if settings.otlp_endpoint and not any(
            isinstance(f, _NoLogExportNotice) for f in dbos_log.filters
        ):
            dbos_log.addFilter(_NoLogExportNotice())
        DBOS(config=dbos_config(settings))

    def register_turn(self, turn: TurnWorkflow) -> None:
        """The workflow every queued turn runs (registered before launch)."""
        self._turn = turn

    def register_timer(self, timer: TimerWorkflow) -> None:
        """The workflow a due timer runs (registered before launch)."""
        self._timer = timer

    def register_helpers(self, helpers: HelperStopper) -> None:
        """The helpers' engine: the owner's stops (through the router) reach it."""
        self._helpers = helpers

    def stop_now(self, run_ids: list[str]) -> None:
        """Stop helper runs the owner stopped: cancelled, cleaned up, their parents told."""
        if self._helpers is not None:
            self._helpers.stop_now(run_ids)

    def register_compaction(
        self, compaction: Callable[[str, str], Coroutine[Any, Any, str]]
    ) -> None:
        """The workflow that compacts a conversation (registered before launch)."""
        self._compaction = compaction

    async def schedule_compaction(
        self, conversation_id: str, after_turn: str, delay_s: float
    ) -> None:
        """Compact the conversation after `delay_s` of quiet; durable, one per turn."""
        if self._compaction is None or self._compaction_queue is None:
            return  # this server runs without a model: nothing to summarise with
        with SetWorkflowID(f"compact-{after_turn}"), SetEnqueueOptions(delay_seconds=delay_s):
            await self._compaction_queue.enqueue_async(
                self._compaction, conversation_id, after_turn
            )

    async def schedule_timer(
        self, timer_id: str, conversation_id: str, seconds: float, note: str
    ) -> None:
        """Start the timer workflow in `seconds`; durable, and a no-op if the id exists."""
        if self._timer is None or self._timer_queue is None:
            raise RuntimeError("the engine is not launched")
        with SetWorkflowID(timer_id), SetEnqueueOptions(delay_seconds=seconds):
            await self._timer_queue.enqueue_async(self._timer, timer_id, conversation_id, note)

    def launch(self) -> None:
        """Start DBOS: recover this executor's unfinished workflows and start dispatching."""
        DBOS.launch()
        self._queue = DBOS.register_queue(
            CONVERSATION_QUEUE,
            partition_concurrency=1,
            polling_interval_sec=self._settings.queue_polling_interval_s,
        )
        self._fast = True
        self._last_activity = time.monotonic()
        self._timer_queue = DBOS.register_queue(TIMER_QUEUE, polling_interval_sec=1.0)
        # One summary at a time: compaction is background work.
        self._compaction_queue = DBOS.register_queue(
            COMPACTION_QUEUE, concurrency=1, polling_interval_sec=1.0
        )

    def wake(self, turn: TurnInfo, delay_s: float = 0.0) -> None:
        """Enqueue the turn's workflow soon, off the caller's path; traced, it joins the
        caller's trace (the router's decision on its trigger).

        Losing this (a crash right now) loses nothing: the turn stays `queued` in the app
        store and start-up enqueues every queued turn again.
        """
        trace_context = otel_context.get_current() if self._settings.otlp_endpoint else None
        self._waker.submit(self.enqueue, turn, delay_s, trace_context)

    def preempt(self, turn_ids: list[str]) -> None:
        """Cancel running turns: first durably through DBOS (so no restart resumes them, and
        their queue slot frees), then at once if they run in this process."""
        for turn_id in turn_ids:
            DBOS.cancel_workflow(turn_id)
            self.running.cancel(turn_id)

    def deliver_answer(self, turn_id: str, question_id: str) -> None:
        """Wake the turn waiting on this question (its answer is already stored).

        Idempotent per question, so sending it again after a crash does no harm.
        """
        DBOS.send(
            turn_id,
            "answered",
            topic=f"answer:{question_id}",
            idempotency_key=f"answer:{question_id}",
        )

    def enqueue(
        self,
        turn: TurnInfo,
        delay_s: float = 0.0,
        trace_context: otel_context.Context | None = None,
    ) -> None:
        """Enqueue the turn's workflow now; enqueuing an id that exists already is a no-op.
        `trace_context`: the trace the workflow's spans join (kept with the workflow, so a
        recovered turn joins it too)."""
        if self._turn is None or self._queue is None:
            raise RuntimeError("the engine is not launched")
        self._last_activity = time.monotonic()
        if not self._fast:
            self._set_pace(fast=True)
        with (
            SetWorkflowID(turn.id),
            SetEnqueueOptions(
                priority=turn.priority,
                queue_partition_key=turn.conversation_id,
                delay_seconds=delay_s or None,
            ),
            PropagateOtelContext(trace_context) if trace_context is not None else nullcontext(),
        ):
            self._queue.enqueue(self._turn, turn.id)
        if not delay_s:
            # Start it now rather than at the next poll (the owner is waiting).
            self.nudge(CONVERSATION_QUEUE)

    def nudge(self, queue: str | None = None) -> None:
        """Have DBOS's queues poll now (something urgent was enqueued on `queue`; None: on
        any): this process's, or the workers' when this one does not dispatch."""
        if self.dispatches:
            self._nudge.nudge(queue)
        else:
            self.wake_workers()

    def nudge_here(self) -> None:
        """Have this process's queue threads poll now (another process enqueued)."""
        self._nudge.nudge()

    @property
    def dispatches_at_once(self) -> bool:
        """True when an urgent turn is dispatched on enqueue, not at the next queue poll."""
        return self._nudge.active

    def _set_pace(self, *, fast: bool) -> None:
        interval = (
            self._settings.queue_polling_interval_s
            if fast
            else self._settings.queue_idle_polling_interval_s
        )
        self._queue.set_polling_interval_sec(interval)
        self._fast = fast

    def relax_when_idle(self, waiting: bool) -> None:
        """Poll the queue slowly once no turn waits to be dispatched (and nothing was enqueued
        within the active window, none by default).

        Each poll of the conversation queue costs DBOS several milliseconds of CPU: at the
        active rate a server would burn a sixth of a core on it. A poll only matters while a
        turn waits in the queue: an urgent one is dispatched on enqueue (the nudge), a running
        turn needs none, and one queued behind another (its conversation's turn still runs) or
        enqueued with a delay keeps the queue at the active rate until it starts. So the queue
        polls fast only while some turn is `queued`; the rest of the time at the idle rate.
        """
        quiet = time.monotonic() - self._last_activity > self._settings.queue_active_window_s
        if self._fast and quiet and not waiting and self._queue is not None:
            self._set_pace(fast=False)
        elif not self._fast and waiting and self._queue is not None:
            self._set_pace(fast=True)

    def recover(self, executor_id: str) -> int:
        """Take over the unfinished workflows of a dead worker; returns how many."""
        return dbos_internals.recover_executor(executor_id)

    def restart_stranded(self, grace_s: float = STRANDED_GRACE_S) -> list[str]:
        """Start again this worker's workflows that DBOS claimed from a queue but never ran.

        DBOS's queue thread claims a workflow (PENDING, this executor) in one transaction and
        then reads its status to run it; when the database goes away between the two, it
        logs the error and the workflow stays claimed, run by no one, until this process
        restarts — and a conversation's queue (one turn at a time) dispatches nothing more
        behind it. Found in a full-suite run of the in-flight outage test. A workflow of
        this executor that stays PENDING and not running here for `grace_s` (two looks) is
        re-enqueued as DBOS's own recovery does (its atomic dequeue admits one runner)."""
        pending = DBOS.list_workflows(
            status="PENDING",
            executor_id=self._settings.worker_id,
            app_version=self._settings.application_version,
            load_input=False,
            load_output=False,
        )
        running = dbos_internals.running_here()
        now = time.monotonic()
        seen: dict[str, float] = {}
        restarted = []
        for workflow in pending:
            if workflow.workflow_id in running:
                continue
            first = self._stranded.get(workflow.workflow_id, now)
            if now - first < grace_s:
                seen[workflow.workflow_id] = first
                continue
            dbos_internals.reenqueue_claimed(
                workflow.workflow_id, workflow.shard_key, self._settings.worker_id
            )
            restarted.append(workflow.workflow_id)
        self._stranded = seen
        if restarted:
            log.warning("restarted workflows claimed but never run", extra={"ids": restarted})
        return restarted

    def delete_finished_before(self, cutoff_iso: str, batch: int = 500) -> int:
        """Delete finished workflow records that completed before `cutoff_iso`."""
        deleted = 0
        while True:
            finished = DBOS.list_workflows(
                status=["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"],
                completed_before=cutoff_iso,
                limit=batch,
                load_input=False,
                load_output=False,
            )
            if not finished:
                return deleted
            DBOS.delete_workflows([status.workflow_id for status in finished])
            deleted += len(finished)

    def shutdown(self) -> None:
        """Stop DBOS without waiting: unfinished turns resume on restart or on another worker."""
        self.running.closing = True  # before DBOS cancels them: not a preemption
        self._waker.shutdown(wait=True)
        DBOS.destroy(destroy_registry=True)
