"""Eval cases and replay results: the SQL behind evals/ (see store/eval_tables.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid, NotFound
from nightowl.store.eval_tables import EvalCaseRow, EvalResultRow
from nightowl.store.ids import keyed_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import utcnow


@dataclass(frozen=True)
class CaseInfo:
    """A stored case's row, as plain data."""

    id: str
    owner_id: str
    source: str
    status: str
    title: str
    conversation_id: str | None
    turn_id: str | None
    message_id: str | None
    data: dict[str, Any]
    checker: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    def case_data(self) -> dict[str, Any]:
        """The row as `EvalCase.from_dict` reads it."""
        return {
            "id": self.id,
            "title": self.title,
            "source": self.source,
            "status": self.status,
            **self.data,
            "checker": self.checker,
        }


def _info(row: EvalCaseRow) -> CaseInfo:
    return view_of(CaseInfo, row, data=dict(row.data), checker=dict(row.checker))


def add_case(
    session: Session,
    *,
    owner_id: str,
    source: str,
    source_key: str,
    title: str,
    data: dict[str, Any],
    checker: dict[str, Any],
    conversation_id: str | None = None,
    turn_id: str | None = None,
    message_id: str | None = None,
) -> CaseInfo:
    """A new draft case, or the one this (source, key) made before (a step that runs again,
    or the owner marking the same reply twice, finds it rather than making another)."""
    case_id = keyed_id("case", f"{source}:{source_key}")
    found = session.get(EvalCaseRow, case_id)
    if found is None:
        found = EvalCaseRow(
            id=case_id,
            owner_id=owner_id,
            source=source,
            source_key=source_key,
            status="draft",
            title=title[:200],
            conversation_id=conversation_id,
            turn_id=turn_id,
            message_id=message_id,
            data=data,
            checker=checker,
        )
        session.add(found)
        session.flush()
    return _info(found)


def get_case(session: Session, case_id: str, owner_id: str) -> CaseInfo:
    """The owner's case, or NotFound."""
    row = session.get(EvalCaseRow, case_id)
    if row is None or row.owner_id != owner_id:
        raise NotFound(f"no eval case {case_id!r}")
    return _info(row)


def list_cases(session: Session, owner_id: str, status: str | None = None) -> list[CaseInfo]:
    """The owner's cases, newest first (only `status` ones when given)."""
    query = select(EvalCaseRow).where(EvalCaseRow.owner_id == owner_id)
    if status is not None:
        query = query.where(EvalCaseRow.status == status)
    rows = session.scalars(query.order_by(EvalCaseRow.created_at.desc(), EvalCaseRow.id))
    return [_info(row) for row in rows]


def update_case(
    session: Session,
    case_id: str,
    owner_id: str,
    *,
    checker: dict[str, Any] | None = None,
    status: str | None = None,
    title: str | None = None,
) -> CaseInfo:
    """Change a case's checker (already validated), status or title."""
    row = session.get(EvalCaseRow, case_id)
    if row is None or row.owner_id != owner_id:
        raise NotFound(f"no eval case {case_id!r}")
    if status is not None:
        if status not in ("draft", "kept", "dropped"):
            raise Invalid("status is draft, kept or dropped")
        row.status = status
    if checker is not None:
        row.checker = checker
    if title is not None:
        row.title = title[:200]
    row.updated_at = utcnow()
    session.flush()
    return _info(row)


@dataclass(frozen=True)
class ResultInfo:
    """One stored replay result."""

    run_id: str
    case_id: str
    model: str
    passed: bool
    detail: dict[str, Any]
    error: str
    cost_usd: float | None
    tokens: int
    seconds: float
    created_at: datetime


def add_result(
    session: Session,
    *,
    run_id: str,
    case_id: str,
    model: str,
    passed: bool,
    detail: dict[str, Any],
    error: str,
    cost_usd: float | None,
    tokens: int,
    seconds: float,
) -> None:
    """Keep one replay's result."""
    session.add(
        EvalResultRow(
            run_id=run_id,
            case_id=case_id,
            model=model,
            passed=passed,
            detail=detail,
            error=error,
            cost_usd=cost_usd,
            tokens=tokens,
            seconds=seconds,
        )
    )
    session.flush()


def _result(row: EvalResultRow) -> ResultInfo:
    return view_of(ResultInfo, row, detail=dict(row.detail))


def last_results(
    session: Session, model: str, case_ids: list[str], before_run: str
) -> dict[str, ResultInfo]:
    """Each case's latest result on `model` from a run other than `before_run`: what this
    run is compared with (fixed, regressed)."""
    found: dict[str, ResultInfo] = {}
    for start in range(0, len(case_ids), 500):
        rows = session.scalars(
            select(EvalResultRow)
            .where(
                EvalResultRow.model == model,
                EvalResultRow.case_id.in_(case_ids[start : start + 500]),
                EvalResultRow.run_id != before_run,
            )
            .order_by(EvalResultRow.id)
        )
        for row in rows:
            found[row.case_id] = _result(row)
    return found


def results_of(session: Session, case_ids: list[str], per_case: int = 20) -> list[ResultInfo]:
    """The latest `per_case` results of each case on any model, oldest first (trends)."""
    found: list[ResultInfo] = []
    for start in range(0, len(case_ids), 500):
        rows = session.scalars(
            select(EvalResultRow)
            .where(EvalResultRow.case_id.in_(case_ids[start : start + 500]))
            .order_by(EvalResultRow.id.desc())
        )
        counts: dict[tuple[str, str], int] = {}
        for row in rows:
            key = (row.case_id, row.model)
            if counts.get(key, 0) < per_case:
                counts[key] = counts.get(key, 0) + 1
                found.append(_result(row))
    return sorted(found, key=lambda r: (r.created_at, r.case_id))
