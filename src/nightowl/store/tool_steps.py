"""What a tool call's step reads before its tool runs, in one statement: its committed result
(a re-run returns it), the run's status (a stopped run goes no further) and whether an earlier
attempt died while the tool ran (engine/tool_calls.py). Three statements were three round
trips on PostgreSQL and most of the step's own cost on SQLite; every tool call runs this."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, exists, select
from sqlalchemy.orm import Session

from nightowl.store.step_results import Recorded
from nightowl.store.tables import StepResult, ToolRun, Turn


@dataclass(frozen=True)
class ToolStepState:
    """The step's committed result (None: never committed), its run's status (None: no such
    run in the store) and whether a run of the step started and never finished."""

    recorded: Recorded | None
    run_status: str | None
    unfinished: bool


def tool_step_state(session: Session, step_key: str, run_id: str) -> ToolStepState:
    """What the step `step_key` of the run `run_id` finds before its tool runs."""
    session.flush()  # Core on the session's connection: what the session holds goes first
    row = session.connection().execute(_STATE, {"key": step_key, "run_id": run_id}).one()
    return ToolStepState(
        recorded=Recorded(row.result) if row.has_result else None,
        run_status=row.status,
        unfinished=bool(row.unfinished),
    )


# Prebuilt (Core, on the session's connection). A stored result may itself be null, so
# whether there is one is asked apart from its value.
_STATE = select(
    exists().where(StepResult.key == bindparam("key")).label("has_result"),
    select(StepResult.result)
    .where(StepResult.key == bindparam("key"))
    .scalar_subquery()
    .label("result"),
    select(Turn.status).where(Turn.id == bindparam("run_id")).scalar_subquery().label("status"),
    exists()
    .where(ToolRun.step_key == bindparam("key"), ToolRun.finished_at.is_(None))
    .label("unfinished"),
)
