"""Helpers in the store: a sub-agent's record, its own (hidden) conversation, its runs.

A helper has a conversation of kind "helper" that holds its transcript, pin and budget, so the
agent loop runs over it exactly as over a conversation. Each task given to it is a run: a
workflow whose id (`helper-<id>-<n>`) is also the id of its `turns` row, so questions,
approvals, activity and crash parking work for it as for a turn. What it shows the owner
(approvals, drafts) appears in its parent conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from nightowl.store.changes import Change, record_change
from nightowl.store.conversations import append_message
from nightowl.store.errors import Conflict, Invalid, NotFound
from nightowl.store.ids import keyed_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, Helper, ModelCall, Turn, User, utcnow

KINDS = ("general", "computer", "isolated")
ACTIVE = ("queued", "running")
MAX_TASK_CHARS = 20_000
HELPER_CHANNEL = "helper"


@dataclass(frozen=True)
class HelperInfo:
    """A helper and where it stands."""

    id: str
    owner_id: str
    parent_conversation_id: str
    conversation_id: str
    name: str | None
    kind: str
    status: str
    task: str
    run_id: str
    runs: int
    progress: str
    report: str | None
    report_trust: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def title(self) -> str:
        """The task's first line, short: what the helper's list shows."""
        first = self.task.strip().splitlines()[0] if self.task.strip() else ""
        return first if len(first) <= 80 else first[:77] + "..."

    @property
    def label(self) -> str:
        """How the owner and the main agent refer to it."""
        return f"{self.name} ({self.id})" if self.name else self.id


def _info(row: Helper) -> HelperInfo:
    return view_of(HelperInfo, row)


def run_id_of(helper_id: str, run: int) -> str:
    """The workflow (and `turns` row) id of a helper's `run`-th task."""
    return f"helper-{helper_id}-{run}"


def start_helper(
    session: Session,
    owner_id: str,
    parent_conversation_id: str,
    task: str,
    *,
    kind: str = "general",
    name: str | None = None,
    key: str,
    trust: str = "agent",
) -> HelperInfo:
    """Give a helper its task, once per `key` (the tool call): a new helper, or the named one
    (which keeps its transcript) for its next run. Its task becomes the first message of
    the run in its conversation, of trust `trust` (untrusted when the parent read outside
    text). Conflict if the named helper is still working."""
    if kind not in KINDS:
        raise Invalid(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    task = task.strip()
    if not task:
        raise Invalid("a helper needs a task: describe it completely, it sees nothing else")
    if len(task) > MAX_TASK_CHARS:
        raise Invalid(f"a task is at most {MAX_TASK_CHARS:,} characters")
    existing = session.get(Helper, keyed_id("hlp", key))
    if existing is not None:  # this call started it already (a re-run after a crash)
        return _info(existing)
    row = _named(session, owner_id, name) if name else None
    if row is not None:
        if row.status in ACTIVE:
            raise Conflict(
                f"the helper {name!r} is still working on its last task; message it "
                "(message_helper) or wait for its report"
            )
        row.runs += 1
        row.task, row.status, row.kind = task, "queued", kind
        row.parent_conversation_id = parent_conversation_id
        row.report, row.progress, row.finished_at, row.started_at = None, "", None, None
        row.run_id = run_id_of(row.id, row.runs)
    else:
        helper_id = keyed_id("hlp", key)
        conversation = Conversation(
            id=keyed_id("conv", key),
            owner_id=owner_id,
            kind="helper",
            channel=HELPER_CHANNEL,
            external_key=helper_id,
            title=f"helper {name or helper_id}",
        )
        session.add(conversation)
        session.flush()
        row = Helper(
            id=helper_id,
            owner_id=owner_id,
            parent_conversation_id=parent_conversation_id,
            conversation_id=conversation.id,
            name=name,
            kind=kind,
            status="queued",
            task=task,
            run_id=run_id_of(helper_id, 1),
            runs=1,
        )
        session.add(row)
    session.flush()
    append_message(
        session,
        row.conversation_id,
        role="user",
        body=f"{task}\n\n({_workplace(row)})",
        trust=trust,
        server_key=f"task:{row.run_id}",
    )
    return _info(row)


def scratch_folder(helper_id: str) -> str:
    """A general helper's scratch folder in its owner's home (removed when a run ends)."""
    return f"helpers/{helper_id}/scratch"


def _workplace(row: Helper) -> str:
    if row.kind == "isolated":
        return (
            "You work in a computer of your own, destroyed when you finish: everything that "
            "matters goes into your report."
        )
    # The home first: told only of its scratch folder, a small model looked for the owner's
    # files there (bench/local_helper.py).
    return (
        "You work in the owner's computer: its files are in your home folder ~, where "
        "relative paths start. For temporary files of your own use "
        f"~/{scratch_folder(row.id)} (removed when you finish); files worth keeping go "
        "elsewhere in ~; name them in your report."
    )


def _named(session: Session, owner_id: str, name: str) -> Helper | None:
    return session.scalar(
        select(Helper).where(Helper.owner_id == owner_id, Helper.name == name).limit(1)
    )


def get_helper(session: Session, owner_id: str, helper_id: str) -> HelperInfo:
    """One of the owner's helpers, by id or name."""
    row = session.get(Helper, helper_id)
    if row is None or row.owner_id != owner_id:
        row = _named(session, owner_id, helper_id)
    if row is None:
        raise NotFound(f"no helper {helper_id!r}; list_helpers shows the ones there are")
    return _info(row)


def helper_of_run(session: Session, run_id: str) -> HelperInfo:
    """The helper whose run this is."""
    row = session.scalar(select(Helper).where(Helper.run_id == run_id))
    if row is None:
        raise NotFound(f"no helper run {run_id!r}")
    return _info(row)


def helpers_of(session: Session, parent_conversation_id: str) -> list[HelperInfo]:
    """The helpers working (or that worked) for a conversation, oldest first; a working
    one's progress is what its run is doing now."""
    rows = session.execute(
        select(Helper, Turn.activity)
        .outerjoin(Turn, Turn.id == Helper.run_id)
        .where(Helper.parent_conversation_id == parent_conversation_id)
        .order_by(Helper.created_at, Helper.id)
    ).all()
    return [
        replace(_info(row), progress=activity or row.progress)
        if row.status in ACTIVE
        else _info(row)
        for row, activity in rows
    ]


def helpers_of_owner(session: Session, owner_id: str, limit: int = 200) -> list[HelperInfo]:
    """An owner's helpers across conversations, newest first."""
    rows = session.scalars(
        select(Helper)
        .where(Helper.owner_id == owner_id)
        .order_by(Helper.created_at.desc(), Helper.id)
        .limit(limit)
    )
    return [_info(row) for row in rows]


def active_helpers(session: Session, parent_conversation_id: str) -> list[HelperInfo]:
    """The conversation's helpers still queued or running."""
    return [h for h in helpers_of(session, parent_conversation_id) if h.status in ACTIVE]


def begin_run(session: Session, run_id: str) -> HelperInfo | None:
    """Mark the run started (its `turns` row running, the helper running); None when it was
    stopped before it started."""
    row = session.scalar(select(Helper).where(Helper.run_id == run_id))
    if row is None or row.status not in ACTIVE:
        return None
    if session.get(Turn, run_id) is None:
        session.add(
            Turn(
                id=run_id,
                conversation_id=row.conversation_id,
                status="running",
                priority=0,
                activity="starting",
                started_at=utcnow(),
            )
        )
    if row.status == "queued":
        row.status, row.started_at = "running", utcnow()
    session.flush()
    _announce(session, row)
    return _info(row)


def _announce(session: Session, row: Helper) -> None:
    """The parent conversation's clients hear that a helper's state changed (no content)."""
    seq = session.scalar(
        select(Conversation.last_seq).where(Conversation.id == row.parent_conversation_id)
    )
    change = Change(row.parent_conversation_id, row.owner_id, seq or 0, "activity")
    record_change(session, change)


def note_progress(session: Session, run_id: str, progress: str) -> None:
    """The helper's last step, in words (its list shows it)."""
    session.execute(update(Helper).where(Helper.run_id == run_id).values(progress=progress[:300]))


def end_run(
    session: Session, run_id: str, status: str, report: str | None, trust: str
) -> HelperInfo | None:
    """Record how the run ended and its report (once: a run already ended keeps its end);
    None when it had ended already."""
    row = session.scalar(select(Helper).where(Helper.run_id == run_id))
    if row is None or row.status not in ACTIVE:
        return None
    row.status, row.report, row.report_trust = status, report, trust
    row.finished_at = utcnow()
    _announce(session, row)
    session.execute(
        update(Turn)
        .where(Turn.id == run_id, Turn.status.in_(("queued", "running")))
        .values(
            status="done" if status == "done" else "failed",
            finished_at=utcnow(),
            activity="",
            waiting_on=None,
        )
    )
    session.flush()
    return _info(row)


def add_guidance(session: Session, helper: HelperInfo, text: str, trust: str, key: str) -> None:
    """A message for a working helper: it reads it before its next model call."""
    if helper.status not in ACTIVE:
        raise Conflict(f"the helper {helper.label} is {helper.status}; start it with a new task")
    text = text.strip()
    if not text:
        raise Invalid("the message is empty; write what the helper should know")
    append_message(
        session, helper.conversation_id, role="user", body=text, trust=trust, server_key=key
    )


def isolated_computer_of(session: Session, helper: HelperInfo) -> str:
    """The id an isolated helper's own computer goes by (a hidden user of role "helper", so
    it gets a sandbox, a host uid and a home of its own)."""
    user_id = f"usr_{helper.id}"
    if session.get(User, user_id) is None:
        session.add(User(id=user_id, name=f"helper {helper.id}", role="helper"))
        session.flush()
    return user_id


def surface_of(session: Session, conversation_id: str) -> str:
    """Where what a conversation shows the owner appears: a helper's questions and
    approvals in its parent conversation, any other conversation's in itself."""
    parent = session.scalar(
        select(Helper.parent_conversation_id).where(Helper.conversation_id == conversation_id)
    )
    return parent or conversation_id


def helper_costs(session: Session, conversation_ids: list[str]) -> dict[str, tuple[int, float]]:
    """Tokens and cost so far per helper conversation."""
    if not conversation_ids:
        return {}
    rows = session.execute(
        select(
            ModelCall.conversation_id,
            func.coalesce(
                func.sum(
                    ModelCall.input_tokens + ModelCall.cache_read_tokens + ModelCall.output_tokens
                ),
                0,
            ),
            func.coalesce(func.sum(ModelCall.cost_usd), 0.0),
        )
        .where(ModelCall.conversation_id.in_(conversation_ids))
        .group_by(ModelCall.conversation_id)
    )
    return {row[0]: (int(row[1] or 0), float(row[2] or 0.0)) for row in rows}
