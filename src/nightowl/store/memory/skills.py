"""Skills in the store: rows by user and name, each change recorded as a version."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from nightowl.store.errors import NotFound
from nightowl.store.ids import new_id
from nightowl.store.memory.owned import owned_item
from nightowl.store.memory_tables import Skill
from nightowl.store.memory_versions import OWNER, Author, record, remove_recorded, snapshot
from nightowl.store.row_views import view_of
from nightowl.store.tables import utcnow


@dataclass(frozen=True)
class SkillInfo:
    """A skill."""

    id: str
    name: str
    description: str
    body: str
    created_by: str
    approved: bool
    created_at: datetime
    updated_at: datetime
    trust: str  # memory-trust: owner | agent | untrusted (written in a turn that read outside text)


def _info(row: Skill) -> SkillInfo:
    return view_of(SkillInfo, row)


def save_skill(
    session: Session,
    user_id: str,
    name: str,
    description: str,
    body: str,
    *,
    created_by: str,
    approved: bool,
    trust: str,
    by: Author,
) -> SkillInfo:
    """Create or rewrite the user's skill `name` (its text checked already); a version
    records it."""
    row = session.scalar(select(Skill).where(Skill.user_id == user_id, Skill.name == name))
    before = snapshot(row) if row is not None else None
    now = utcnow()
    if row is None:
        row = Skill(id=new_id("skill"), user_id=user_id, name=name, created_at=now)
        session.add(row)
    row.description, row.body, row.updated_at = description, body, now
    row.created_by = created_by
    row.approved = approved
    row.trust = trust
    session.flush()
    action = "added" if before is None else "changed"
    record(session, "skill", row.id, user_id, action, before, snapshot(row), by)
    return _info(row)


def _row(session: Session, user_id: str, skill_id: str) -> Skill:
    return owned_item(session, Skill, skill_id, user_id, f"no skill {skill_id}")


def get_skill(session: Session, user_id: str, skill_id: str) -> SkillInfo:
    """One of the user's skills by id."""
    return _info(_row(session, user_id, skill_id))


def skill_by_name(session: Session, user_id: str, name: str) -> SkillInfo:
    """One of the user's skills by name (NotFound names the ones there are)."""
    row = session.scalar(select(Skill).where(Skill.user_id == user_id, Skill.name == name))
    if row is None:
        names = [s.name for s in list_skills(session, user_id)]
        raise NotFound(f"no skill named {name!r} (there are: {', '.join(names) or 'none'})")
    return _info(row)


def update_skill(
    session: Session,
    user_id: str,
    skill_id: str,
    *,
    description: str,
    body: str,
    approved: bool | None,
) -> SkillInfo:
    """The owner's correction or review (its text checked already): a changed text makes the
    skill the owner's (approving leaves its trust as it was); a version records a change."""
    row = _row(session, user_id, skill_id)
    before = snapshot(row)
    if (description, body) != (row.description, row.body):
        row.description, row.body, row.updated_at = description, body, utcnow()
        row.trust = "owner"
    if approved is not None:
        row.approved = approved
    session.flush()
    after = snapshot(row)
    if after != before:
        record(session, "skill", skill_id, user_id, "changed", before, after, OWNER)
    return _info(row)


def delete_skill(session: Session, user_id: str, skill_id: str) -> None:
    """Delete a skill (its versions keep it: a revert brings it back)."""
    row = _row(session, user_id, skill_id)
    remove_recorded(session, "skill", row, user_id)


def skill_lines(session: Session, user_id: str) -> list[tuple[str, str, bool, str]]:
    """The user's skills by name as the prompt lists them: name, description, approved, trust
    (the bodies, up to 20,000 characters each, stay in the database)."""
    rows = session.execute(_SKILL_LINES, {"user_id": user_id})
    return [
        (str(name), str(description), bool(approved), str(trust))
        for name, description, approved, trust in rows
    ]


# Prebuilt: every model call's profile reads them.
_SKILL_LINES = (
    select(Skill.name, Skill.description, Skill.approved, Skill.trust)
    .where(Skill.user_id == bindparam("user_id"))
    .order_by(Skill.name)
)


def list_skills(session: Session, user_id: str) -> list[SkillInfo]:
    """The user's skills by name."""
    rows = session.scalars(select(Skill).where(Skill.user_id == user_id).order_by(Skill.name))
    return [_info(row) for row in rows]
