"""The eval tables: cases made from the owner's "that was wrong" or from a failure the system
flagged itself, and the result of each replay of a case on a model."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from nightowl.store.tables import Base, BigId, utcnow


class EvalCaseRow(Base):
    """A case: the conversation up to the failing step (secrets redacted), the recorded tool
    results that stand in for tools on replay, the owner's words and the checker."""

    __tablename__ = "eval_cases"
    # An automatic flag fires from steps that may run twice: one case per (source, key).
    __table_args__ = (UniqueConstraint("source", "source_key", name="uq_eval_case_source"),)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # marked | guard_stop | tool_error_loop | approved_block | denied_approval | misunderstood
    source: Mapped[str] = mapped_column(String(32))
    source_key: Mapped[str] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(16), default="draft")  # draft | kept | dropped
    title: Mapped[str] = mapped_column(String(200))
    conversation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    turn_id: Mapped[str | None] = mapped_column(String(200), default=None)
    message_id: Mapped[str | None] = mapped_column(String(64), default=None)
    # history, tool_results, owner_words, failed_reply (see evals/cases.py)
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checker: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class EvalResultRow(Base):
    """One replay of one case on one model: passed or not, why, and what it cost."""

    __tablename__ = "eval_results"
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64), index=True)  # one `evals run`
    case_id: Mapped[str] = mapped_column(String(100), index=True)  # a row's id, or "shipped:…"
    model: Mapped[str] = mapped_column(String(300))
    passed: Mapped[bool] = mapped_column(Boolean)
    # Each check's verdict, the calls made and the text sent (evals/checkers.py).
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str] = mapped_column(Text, default="")
    cost_usd: Mapped[float | None] = mapped_column(Float, default=None)
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
