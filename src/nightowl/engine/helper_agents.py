"""Helpers run as workflows of their own: a sub-agent with a fresh context (its own hidden
conversation), the same agent loop and safety gate as a turn, its own model, tools and limits.

A helper's run is started by its parent turn's loop (a follow-up of `start_helper`) on the
helpers queue: one queue partition per owner, so only so many of an owner's helpers run at
once and the rest wait. The run takes its task, runs the loop until the helper calls `report`
(or stops on a guard, or fails), records how it ended, hands the report to its parent
conversation through the router (a trigger of source `helper`: the parent's next turn sees it
as the helper's result, never the owner's words), and cleans up. A crashed run resumes by
itself (it is a workflow); `stop` cancels it and a stop workflow does the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Literal

from dbos import DBOS, PropagateOtelContext, SetEnqueueOptions, SetWorkflowID

from nightowl.computer.sandbox import HOME_INSIDE, SandboxError
from nightowl.engine.agent_loop import AgentLoop, LoopContext, LoopProfile
from nightowl.engine.batches import take_turn_batch
from nightowl.engine.parking import TurnParking
from nightowl.engine.turn_deps import TurnDeps
from nightowl.harness.guard import GuardLimits
from nightowl.harness.loop import LoopEnd
from nightowl.harness.prompt import HELPER_PROMPT
from nightowl.messages import Entry
from nightowl.models.base import Model
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.helper_agents import (
    HelperInfo,
    begin_run,
    end_run,
    helper_of_run,
    isolated_computer_of,
    scratch_folder,
)
from nightowl.store.outages import outlast
from nightowl.store.transcript import load_turn_entries
from nightowl.tools.helper_agents import HELPER_TOOLS, REPORT
from nightowl.tools.providers import Toolbox

log = logging.getLogger(__name__)

HELPER_WORKFLOW = "nightowl.helper"
HELPER_STOPPED = "nightowl.helper_stopped"
HELPER_PROFILE = "helper"
HELPER_QUEUE = "nightowl-helpers"


@dataclass(frozen=True)
class HelperSettings:
    """How far helpers may go: at once per owner, and each run's steps and budget."""

    per_owner: int = 3
    max_steps: int = 60
    budget_usd: float = 2.0


def helper_limits(limits: GuardLimits, settings: HelperSettings) -> GuardLimits:
    """A helper's own limits: its steps and budget, the rest as a turn's."""
    return replace(
        limits, max_steps=settings.max_steps, conversation_budget_usd=settings.budget_usd
    )


def helper_profile(
    model: Model, tools: Toolbox, limits: GuardLimits, settings: HelperSettings
) -> LoopProfile:
    """A helper's profile: its model, the helper instructions, every tool but the owner's
    (send_to_user) and the helper tools (no helpers of helpers), its own limits."""
    builtin = tools.builtin.without({"send_to_user", *HELPER_TOOLS})
    return LoopProfile(
        HELPER_PROFILE,
        model,
        HELPER_PROMPT,
        Toolbox(builtin, tools.providers),
        helper_limits(limits, settings),
        takes_guidance=True,
        purpose="helper",
    )


def report_of(entries: list[Entry]) -> str | None:
    """The report the run's helper made (its `report` call's text), if it made one."""
    calls = {c.id: c for e in entries for c in e.tool_calls if c.name == REPORT}
    for entry in reversed(entries):
        if entry.kind == "tool_result" and entry.tool_name == REPORT and not entry.is_error:
            call = calls.get(entry.call_id)
            return str(entry.meta.get("report") or (call.arguments.get("text") if call else ""))
    return None


def ending(helper: HelperInfo, status: str, report: str | None, end: LoopEnd | None) -> str:
    """What the parent conversation reads when a helper's run ends."""
    head = f"Helper {helper.label} ({helper.kind}) on: {helper.title}"
    if status == "done":
        return f"{head}\nReport: {report}" if report else f"{head}\nIt ended without a report."
    if status == "stopped":
        return f"{head}\nIt was stopped before it finished."
    why = (end.stop.message if end and end.stop else "") or (end.error if end else "")
    return f"{head}\nIt failed: {why or 'it could not finish'}."


class Helpers:
    """Starts, runs and stops helpers (the workflows are registered once per process)."""

    def __init__(
        self,
        deps: TurnDeps,
        loop: AgentLoop,
        router: Router,
        nudge: Callable[[str], None] = lambda queue: None,
    ) -> None:
        self.deps, self.loop, self.router, self._nudge = deps, loop, router, nudge
        self._queue: object | None = None
        database, metrics, running = deps.database, deps.metrics, deps.running
        parking = TurnParking(database, metrics, deps.max_recoveries)

        # Not a DBOS step: every start of the run counts itself (parking) and begins in one
        # transaction. Beginning again after a crash changes nothing: the run and the helper
        # are marked once, the task's message is taken once (claimed), under the same keys.
        def begin(run_id: str) -> HelperInfo | Literal["parked"] | None:
            with database.write() as session:
                if parking.count_or_park(session, run_id):
                    return "parked"
                helper = begin_run(session, run_id)
                if helper is not None:
                    take_turn_batch(session, run_id)  # its task: the run's first message
                return helper

        @DBOS.step(name="nightowl.helper_end")
        async def finish(run_id: str, status: str, end: LoopEnd | None) -> None:
            def record() -> tuple[HelperInfo, str] | None:
                with database.write() as session:
                    entries = load_turn_entries(session, run_id)
                    report = report_of(entries) if status == "done" else None
                    tainted = any(e.trust == "untrusted" or e.meta.get("outside") for e in entries)
                    trust = "untrusted" if tainted else "agent"
                    helper = end_run(session, run_id, status, report, trust)
                    if helper is None:
                        return None
                    return helper, ending(helper, status, report, end)

            ended = await outlast(record)
            if ended is None:
                return  # stopped (or ended) already: that end told the parent
            helper, text = ended
            # Once per run (the message's key is the run's): the parent is told after an
            # outage as it would have been without one.
            await outlast(self._tell_parent, helper, text)
            metrics.steps.labels(kind="helper_end").inc()

        @DBOS.step(name="nightowl.helper_cleanup")
        async def cleanup(run_id: str) -> None:
            await self._clean_up(run_id)

        @DBOS.workflow(name=HELPER_WORKFLOW, max_recovery_attempts=None)
        async def helper(run_id: str) -> str:
            running.enter(run_id)
            try:
                started = await outlast(begin, run_id)
                if started == "parked":
                    parking.report_parked(run_id)
                    await finish(run_id, "failed", None)
                    await cleanup(run_id)
                    return "parked"
                if started is None:
                    # Stopped before it began, or ended and killed before its cleanup ran:
                    # the cleanup is idempotent, run it (again).
                    await cleanup(run_id)
                    return "stopped"
                context = LoopContext(
                    HELPER_PROFILE,
                    run_id,
                    started.conversation_id,
                    started.owner_id,
                    computer_id=await outlast(self._computer_id, started),
                )
                with deps.traces.agent_run(HELPER_PROFILE, run_id, context.conversation_id) as span:
                    end = await loop.run(context, self)
                    deps.traces.run_ended(span, end.outcome, end.error)
                status = "done" if end.outcome == "done" else "failed"
                await finish(run_id, status, end)
                await cleanup(run_id)
                return status
            finally:
                running.leave(run_id)
                if deps.computers is not None:
                    await deps.computers.release(run_id)

        @DBOS.step(name="nightowl.helper_stop")
        async def stop_step(run_id: str) -> None:
            def record() -> tuple[HelperInfo, str] | None:
                with database.write() as session:
                    helper = end_run(session, run_id, "stopped", None, "agent")
                    if helper is None:
                        return None
                    return helper, ending(helper, "stopped", None, None)

            ended = await outlast(record)
            if ended is not None:
                await outlast(self._tell_parent, *ended)

        @DBOS.workflow(name=HELPER_STOPPED)
        async def stopped(run_id: str) -> None:
            await stop_step(run_id)
            await cleanup(run_id)

        self._helper, self._stopped = helper, stopped

    def launch(self, per_owner: int) -> None:
        """Register the helpers' queue (after DBOS launched): per owner, so many at once.

        A start nudges the queue (dispatched at once), so the queue itself polls slowly: only
        a helper waiting for one of its owner's slots to free waits for a poll. (At 20 polls a
        second it cost an idle server 7% of a core.)"""
        self._queue = DBOS.register_queue(
            HELPER_QUEUE, partition_concurrency=per_owner, polling_interval_sec=1.0
        )

    async def start(self, helper_id: str, run_id: str, owner_id: str) -> None:
        """Enqueue a helper's run (a no-op if it was enqueued already: the id is the run's)."""
        del helper_id  # the run id names the helper's run
        assert self._queue is not None, "the engine is not launched"
        with (
            SetWorkflowID(run_id),
            SetEnqueueOptions(queue_partition_key=owner_id),
            # Traced, the helper's run joins the trace of the turn that started it.
            PropagateOtelContext() if self.deps.traces.enabled else nullcontext(),
        ):
            await self._queue.enqueue_async(self._helper, run_id)  # type: ignore[attr-defined]
        self._nudge(HELPER_QUEUE)  # dispatched now, not at the queue's next poll

    async def stop(self, run_ids: list[str]) -> None:
        """Stop helper runs (from a workflow: the agent's stop_helper)."""
        await asyncio.to_thread(self.stop_now, run_ids)

    def stop_now(self, run_ids: list[str]) -> None:
        """Stop helper runs: cancel each (at once if it runs in this process), then clean up
        and tell its parent in a workflow of its own (once per run). Blocking."""
        for run_id in run_ids:
            DBOS.cancel_workflow(run_id)
            self.deps.running.cancel(run_id)
            with SetWorkflowID(f"stop-{run_id}"):
                DBOS.start_workflow(self._stopped, run_id)

    def _computer_id(self, helper: HelperInfo) -> str:
        """Whose computer the run uses: its own for an isolated helper, else its owner's."""
        if helper.kind != "isolated":
            return ""
        with self.deps.database.write() as session:
            return isolated_computer_of(session, helper)

    def _tell_parent(self, helper: HelperInfo, text: str) -> None:
        self.router.accept(
            IncomingMessage(
                source="helper",
                idempotency_key=helper.run_id,
                conversation_id=helper.parent_conversation_id,
                text=text,
                trust=helper.report_trust if helper.report is not None else "agent",
                priority=Priority.HELPER,
                role="notice",
            )
        )

    async def _clean_up(self, run_id: str) -> None:
        """Remove what the run made for itself: an isolated helper's computer (destroyed,
        home removed), a general helper's scratch folder."""

        def find() -> HelperInfo:
            with self.deps.database.read() as session:
                return helper_of_run(session, run_id)

        helper = await outlast(find)
        computers = self.deps.computers
        if helper.kind == "isolated":
            computer = await outlast(self._computer_id, helper)
            if computers is not None:  # in process or on its host
                await computers.remove(computer)
        elif computers is not None:
            # Removed inside the computer, as its user: the server (root) removing the folder
            # on its own disk would follow a link the computer made on the way (`~/helpers`
            # to anywhere on this machine), and on a computer tier the folder is on a host.
            holder = f"{run_id}:cleanup"
            folder = f"{HOME_INSIDE}/{scratch_folder(helper.id)}"
            try:
                sandbox = await computers.acquire(helper.owner_id, holder)
                await sandbox.run(["rm", "-rf", "--", folder], timeout_s=120)
            except SandboxError as error:
                log.warning("a scratch folder was not removed", extra={"why": str(error)})
            finally:
                await computers.release(holder)
