"""Steps that keep their own record: the agent loop's model and tool calls.

DBOS runs a step and then records its output in its own database, in a transaction of its
own (after another that checked for an earlier record). The loop's model and tool calls
already commit their result with their writes, under a key of the run and the call
(store/step_results.py), and find it there when they run again: DBOS's record adds nothing
but two transactions per step. So they run as plain coroutines of the workflow: a workflow
that is replayed after a crash calls them again, and each returns its committed result at
once, or runs (at least once, as a DBOS step would).

What a DBOS step also gave, done here: retries with backoff for transient failures (a model
call), and noticing that the run was stopped (a preemption or a Stop on another worker:
DBOS notices a cancelled workflow at its next step) — `ensure_running` in each call's first
transaction.

Two executions of one run (a worker declared dead while alive, and the worker that took its
runs over) can run the same step: the second to record it gets `StepTaken`, its writes roll
back, and the step is replayed from the first one's record, so the run goes on as one. The
late worker stops itself at its next heartbeat (engine/heartbeat.py), and DBOS refuses its
next checkpoint of the workflow (DBOS keeps an owner token per execution).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from dbos import DBOS
from sqlalchemy.orm import Session

from nightowl.models.base import is_transient
from nightowl.store.outages import waits_out_outages
from nightowl.store.step_results import StepTaken
from nightowl.store.turns import HeldTurn, hold_turn

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retries:
    """How often a step is tried, and how long it waits between tries."""

    attempts: int = 1
    interval_s: float = 1.0
    backoff: float = 2.0


MODEL_RETRIES = Retries(attempts=5, interval_s=1.0, backoff=2.0)

P = ParamSpec("P")
R = TypeVar("R")


class RetriesExhausted(Exception):
    """A step failed on every try; `errors` holds each try's error, the last one last."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(f"failed after {len(errors)} tries: {errors[-1]}")
        self.errors = errors


def recorded_step(
    retries: Retries = Retries(),
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    """Run a step that keeps its own record, retrying transient failures."""

    def wrap(step: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        # The database going away (a restart) spends no try: the step waits for it, as DBOS
        # does (the call's record was not committed).
        outlasting = waits_out_outages(step)

        @functools.wraps(step)
        async def tried(*args: P.args, **kwargs: P.kwargs) -> R:
            errors: list[BaseException] = []
            wait = retries.interval_s
            replayed = False
            while True:
                try:
                    return await outlasting(*args, **kwargs)
                except StepTaken as taken:
                    # Its writes rolled back; run again, it returns the other execution's
                    # record (once: a second conflict would be a bug, not a race).
                    if replayed:
                        raise
                    replayed = True
                    log.warning(
                        "a step was recorded by another execution of its run: replayed",
                        extra={"step": taken.key},
                    )
                    continue
                except Exception as error:
                    if not is_transient(error) or retries.attempts <= 1:
                        raise
                    errors.append(error)
                    if len(errors) >= retries.attempts:
                        raise RetriesExhausted(errors) from error
                await asyncio.sleep(wait)
                wait *= retries.backoff

        return tried

    return wrap


def ensure_running(session: Session, run_id: str) -> HeldTurn:
    """Raise CancelledError if the run was stopped (preempted, stopped, parked) meanwhile;
    the run's row, held. The session's identity map holds rows only while someone refers to
    them: a caller that keeps what this returns gets the row from the map when it (or what it
    calls) reads the turn again in the same transaction (the model step's budget check, a
    helper's guidance)."""
    turn = hold_turn(session, run_id)
    stop_unless_running(run_id, turn.status)
    return turn


def stop_unless_running(run_id: str, status: str | None) -> None:
    """Raise CancelledError if the run's status (None: not in the store) says it was stopped."""
    if status is not None and status != "running":
        raise asyncio.CancelledError(f"the run {run_id} was stopped ({status})")


def named_step(name: str, method: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A method as a DBOS step named `name` (DBOS registers plain functions, not bound
    methods: the method is wrapped in one of its name)."""

    async def step(*args: P.args, **kwargs: P.kwargs) -> R:
        return await method(*args, **kwargs)

    step.__name__ = step.__qualname__ = getattr(method, "__name__", name)
    return DBOS.step(name=name)(step)
