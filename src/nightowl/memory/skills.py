"""Skills: markdown how-tos with a name and a one-line description. Names are in the prompt,
bodies are loaded by a tool; a skill the agent writes waits for the owner's review. A skill the
agent writes in a turn that read outside text is untrusted: shown fenced, its body loaded as
data, whether approved or not (only the owner's own rewrite makes it the owner's). Stored by
store/memory/skills.py; its readers are offered here too."""

from __future__ import annotations

import re

from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid
from nightowl.store.memory.skills import (
    SkillInfo,
    delete_skill,
    get_skill,
    list_skills,
    save_skill,
    skill_by_name,
    skill_lines,
    update_skill,
)
from nightowl.store.memory_versions import OWNER, Author

__all__ = [
    "MAX_BODY_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "NAME",
    "SkillInfo",
    "delete_skill",
    "edit_skill",
    "get_skill",
    "list_skills",
    "skill_by_name",
    "skill_lines",
    "write_skill",
]

MAX_NAME_CHARS = 63
NAME = re.compile(rf"^[a-z0-9][a-z0-9-]{{0,{MAX_NAME_CHARS - 1}}}$")
MAX_DESCRIPTION_CHARS = 200
MAX_BODY_CHARS = 20_000


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
    owners = created_by == "owner"
    stored_trust = "owner" if owners else (trust or "agent")
    by = by or (OWNER if owners else Author(created_by, trust=stored_trust))
    return save_skill(
        session,
        user_id,
        name,
        description,
        body,
        created_by=created_by,
        approved=owners,
        trust=stored_trust,
        by=by,
    )


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
    current = get_skill(session, user_id, skill_id)
    _, new_description, new_body = _check(
        current.name, description or current.description, body or current.body
    )
    return update_skill(
        session,
        user_id,
        skill_id,
        description=new_description,
        body=new_body,
        approved=approved,
    )
