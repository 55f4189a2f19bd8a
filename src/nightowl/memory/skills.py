"""Skills: markdown how-tos with a name and a one-line description. Names are in the prompt,
bodies are loaded by a tool; a skill the agent writes waits for the owner's review. A skill the
agent writes in a turn that read outside text is untrusted: shown fenced, its body loaded as
data, whether approved or not (only the owner's own rewrite makes it the owner's)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.memory_tables import Skill
from nightowl.store.memory_versions import OWNER, Author, record, snapshot
from nightowl.store.tables import utcnow

MAX_NAME_CHARS = 63
NAME = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,{MAX_NAME_CHARS - 1}}}$")
MAX_DESCRIPTION_CHARS = 200
MAX_BODY_CHARS = 20_000


@dataclass(frozen=True)
class SkillInfo:
    """A skill."""

    id: str
    user_id: str
    name: str
    description: str
    body: str
    created_by: str
    approved: bool
    created_at: datetime
    updated_at: datetime
    trust: str = "owner"


def _info(row: Skill) -> SkillInfo:
    return SkillInfo(
        row.id,
        row.user_id,
        row.name,
        row.description,
        row.body,
        row.created_by,
        row.approved,
        row.created_at,
        row.updated_at,
        row.trust,
    )


def _check(name: str, description: str, body: str) -> tuple[str, str, str]:
    if not NAME.match(name):
        raise Invalid(
            "a skill name is lowercase letters, digits and dashes (up to 63), e.g. 'book-a-flight'"
        )
    description = " ".join(description.split())
    if not description or len(description) > MAX_DESCRIPTION_CHARS:
        raise Invalid(f"a skill's description is one line of 1 to {MAX_DESCRIPTION_CHARS} chars")
    body = body.strip()
    if not body or len(body) > MAX_BODY_CHARS:
        raise Invalid(f"a skill's body is markdown of 1 to {MAX_BODY_CHARS} characters")
    return name, description, body


def write_skill(
    session: Session,
    user_id: str,
    name: str,
    description: str,
    body: str,
    created_by: str,
    trust: str | None = None,
    *,
    by: Author | None = None,
) -> SkillInfo:
    """Create or rewrite the skill `name`. The owner's skills are approved (trust owner); a
    skill the agent writes or rewrites waits for the owner's review, with `trust` (agent, or
    untrusted when written in a turn that read outside text)."""
    name, description, body = _check(name, description, body)
    row = session.scalar(select(Skill).where(Skill.user_id == user_id, Skill.name == name))
    before = snapshot(row) if row is not None else None
    now = utcnow()
    if row is None:
        row = Skill(id=new_id("skill"), user_id=user_id, name=name, created_at=now)
        session.add(row)
    row.description, row.body, row.updated_at = description, body, now
    row.created_by = created_by
    row.approved = created_by == "owner"
    row.trust = "owner" if created_by == "owner" else (trust or "agent")
    session.flush()
    action = "added" if before is None else "changed"
    by = by or (OWNER if created_by == "owner" else Author(created_by, trust=row.trust))
    record(session, "skill", row.id, user_id, action, before, snapshot(row), by)
    return _info(row)


def _row(session: Session, user_id: str, skill_id: str) -> Skill:
    row = session.get(Skill, skill_id)
    if row is None or row.user_id != user_id:
        raise NotFound(f"no skill {skill_id}")
    return row


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


def edit_skill(
    session: Session,
    user_id: str,
    skill_id: str,
    *,
    description: str | None = None,
    body: str | None = None,
    approved: bool | None = None,
) -> SkillInfo:
    """The owner corrects or reviews a skill; their rewrite of its text makes it theirs
    (approving leaves its trust as it was)."""
    row = _row(session, user_id, skill_id)
    before = snapshot(row)
    _, new_description, new_body = _check(
        row.name, description or row.description, body or row.body
    )
    if (new_description, new_body) != (row.description, row.body):
        row.description, row.body, row.updated_at = new_description, new_body, utcnow()
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
    before = snapshot(row)
    session.delete(row)
    session.flush()
    record(session, "skill", skill_id, user_id, "removed", before, None, OWNER)


def skill_lines(session: Session, user_id: str) -> list[tuple[str, str, bool, str]]:
    """The user's skills by name as the prompt lists them: name, description, approved, trust
    (the bodies, up to 20,000 characters each, stay in the database)."""
    rows = session.execute(
        select(Skill.name, Skill.description, Skill.approved, Skill.trust)
        .where(Skill.user_id == user_id)
        .order_by(Skill.name)
    )
    return [
        (str(name), str(description), bool(approved), str(trust))
        for name, description, approved, trust in rows
    ]


def list_skills(session: Session, user_id: str) -> list[SkillInfo]:
    """The user's skills by name."""
    rows = session.scalars(select(Skill).where(Skill.user_id == user_id).order_by(Skill.name))
    return [_info(row) for row in rows]
