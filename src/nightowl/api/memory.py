"""Memory routes: the owner sees, searches and corrects their facts, work log, notes and skills.
Another user's items answer 404; bad input answers 422 saying what to send."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from nightowl.api.auth import CurrentUser, database_of
from nightowl.api.errors import ApiError, error_responses
from nightowl.api.inputs import Id, PathId, RequestBody, SafeText
from nightowl.memory import facts, notes, skills, worklog
from nightowl.memory.hybrid import search_memory
from nightowl.memory.search import Kind
from nightowl.store import memory_versions as versions
from nightowl.store.memory.facts import FactInfo
from nightowl.store.memory.notes import NoteInfo
from nightowl.store.memory.passes import ConsolidationInfo, consolidations_of
from nightowl.store.memory.skills import SkillInfo
from nightowl.store.memory.worklog import LogEntryInfo

routes = APIRouter(prefix="/v1/memory", tags=["memory"])


@dataclass(frozen=True)
class FactOut(FactInfo):
    """A profile fact and where it came from."""


class NewFact(RequestBody):
    """Body of `POST /v1/memory/facts`."""

    text: SafeText = Field(min_length=1, max_length=facts.MAX_FACT_CHARS)


class FactChange(RequestBody):
    """Body of `PATCH /v1/memory/facts/{id}`: new text, and/or archive or restore it."""

    text: SafeText | None = Field(default=None, min_length=1, max_length=facts.MAX_FACT_CHARS)
    archived: bool | None = None


@dataclass(frozen=True)
class LogEntryOut(LogEntryInfo):
    """A work-log entry."""


class LogChange(RequestBody):
    """Body of `PATCH /v1/memory/log/{id}`."""

    summary: SafeText = Field(min_length=1, max_length=worklog.MAX_ENTRY_CHARS)


@dataclass(frozen=True)
class NoteOut(NoteInfo):
    """A live note."""


@dataclass(frozen=True)
class SkillOut(SkillInfo):
    """A skill."""


class NewSkill(RequestBody):
    """Body of `POST /v1/memory/skills` (the owner's skills are approved)."""

    name: SafeText = Field(
        min_length=1, max_length=skills.MAX_NAME_CHARS, examples=["file-expenses"]
    )
    description: SafeText = Field(min_length=1, max_length=skills.MAX_DESCRIPTION_CHARS)
    body: SafeText = Field(min_length=1, max_length=skills.MAX_BODY_CHARS)


class SkillChange(RequestBody):
    """Body of `PATCH /v1/memory/skills/{id}`: correct it, or review it (approved)."""

    description: SafeText | None = Field(
        default=None, min_length=1, max_length=skills.MAX_DESCRIPTION_CHARS
    )
    body: SafeText | None = Field(default=None, min_length=1, max_length=skills.MAX_BODY_CHARS)
    approved: bool | None = None


class HitOut(BaseModel):
    """A search result."""

    kind: str
    id: str
    text: str
    at: datetime
    score: float


@dataclass(frozen=True)
class ConsolidationOut(ConsolidationInfo):
    """A consolidation of a full profile."""


class MemorySummary(BaseModel):
    """How full the profile is."""

    facts: int
    characters: int
    max_facts: int
    max_characters: int


def _fact(info: FactInfo) -> FactOut:
    return FactOut(**vars(info))


def _entry(info: LogEntryInfo) -> LogEntryOut:
    return LogEntryOut(**vars(info))


def _skill(info: SkillInfo) -> SkillOut:
    return SkillOut(**vars(info))


@routes.get("")
def summary(user: CurrentUser, request: Request) -> MemorySummary:
    """The profile's size against its bounds."""
    with database_of(request).read() as session:
        count, chars = facts.profile_size(session, user.id)
    return MemorySummary(
        facts=count,
        characters=chars,
        max_facts=facts.MAX_FACTS,
        max_characters=facts.MAX_PROFILE_CHARS,
    )


@routes.get("/facts")
def list_facts(user: CurrentUser, request: Request, archived: bool = False) -> list[FactOut]:
    """The caller's profile facts (with `archived=true`, archived ones too)."""
    with database_of(request).read() as session:
        return [_fact(f) for f in facts.list_facts(session, user.id, include_archived=archived)]


@routes.post("/facts", status_code=201)
def add_fact(body: NewFact, user: CurrentUser, request: Request) -> FactOut:
    """Tell nightowl a fact (trusted: it comes from the owner)."""
    with database_of(request).write() as session:
        info = facts.add_fact(session, user.id, body.text, facts.Source("owner"), "owner")
    return _fact(info)


@routes.patch("/facts/{fact_id}")
def change_fact(fact_id: PathId, body: FactChange, user: CurrentUser, request: Request) -> FactOut:
    """Correct a fact's text (it becomes the owner's word), or archive or restore it."""
    if body.text is None and body.archived is None:
        raise ApiError(422, "invalid_request", "send 'text' and/or 'archived'")
    with database_of(request).write() as session:
        info = facts.get_fact(session, user.id, fact_id)
        if body.text is not None:
            info = facts.replace_fact(session, user.id, fact_id, body.text, facts.Source("owner"))
        if body.archived is not None:
            info = facts.set_archived(session, user.id, fact_id, body.archived)
    return _fact(info)


@routes.delete("/facts/{fact_id}", status_code=204)
def delete_fact(fact_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Forget a fact."""
    with database_of(request).write() as session:
        facts.remove_fact(session, user.id, fact_id)
    return Response(status_code=204)


@routes.get("/log")
def list_log(
    user: CurrentUser,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    archived: bool = False,
) -> list[LogEntryOut]:
    """The newest work-log entries first."""
    with database_of(request).read() as session:
        found = worklog.recent_entries(session, user.id, limit, include_archived=archived)
    return [_entry(e) for e in found]


@routes.patch("/log/{entry_id}")
def change_entry(
    entry_id: PathId, body: LogChange, user: CurrentUser, request: Request
) -> LogEntryOut:
    """Correct a work-log entry."""
    with database_of(request).write() as session:
        return _entry(worklog.edit_entry(session, user.id, entry_id, body.summary))


@routes.delete("/log/{entry_id}", status_code=204)
def delete_entry(entry_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Delete a work-log entry."""
    with database_of(request).write() as session:
        worklog.delete_entry(session, user.id, entry_id)
    return Response(status_code=204)


@routes.get("/notes")
def list_notes(user: CurrentUser, request: Request) -> list[NoteOut]:
    """Notes that have not expired."""
    with database_of(request).read() as session:
        found = notes.live_notes(session, user.id)
    return [NoteOut(**vars(n)) for n in found]


@routes.delete("/notes/{note_id}", status_code=204)
def delete_note(note_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Delete a note before it expires."""
    with database_of(request).write() as session:
        notes.delete_note(session, user.id, note_id)
    return Response(status_code=204)


@routes.get("/skills")
def list_skills(user: CurrentUser, request: Request) -> list[SkillOut]:
    """Skills by name, those waiting for review included."""
    with database_of(request).read() as session:
        return [_skill(s) for s in skills.list_skills(session, user.id)]


@routes.post("/skills", status_code=201)
def add_skill(body: NewSkill, user: CurrentUser, request: Request) -> SkillOut:
    """Write (or rewrite) a skill by name; the owner's own skills are approved."""
    with database_of(request).write() as session:
        info = skills.write_skill(session, user.id, body.name, body.description, body.body, "owner")
    return _skill(info)


@routes.get("/skills/{skill_id}")
def get_skill(skill_id: PathId, user: CurrentUser, request: Request) -> SkillOut:
    """One skill with its body."""
    with database_of(request).read() as session:
        return _skill(skills.get_skill(session, user.id, skill_id))


@routes.patch("/skills/{skill_id}")
def change_skill(
    skill_id: PathId, body: SkillChange, user: CurrentUser, request: Request
) -> SkillOut:
    """Correct a skill, or review one the agent wrote (`approved`)."""
    if body.description is None and body.body is None and body.approved is None:
        raise ApiError(422, "invalid_request", "send 'description', 'body' and/or 'approved'")
    with database_of(request).write() as session:
        info = skills.edit_skill(
            session,
            user.id,
            skill_id,
            description=body.description,
            body=body.body,
            approved=body.approved,
        )
    return _skill(info)


@routes.delete("/skills/{skill_id}", status_code=204)
def delete_skill(skill_id: PathId, user: CurrentUser, request: Request) -> Response:
    """Delete a skill."""
    with database_of(request).write() as session:
        skills.delete_skill(session, user.id, skill_id)
    return Response(status_code=204)


@routes.get("/search")
def search(
    user: CurrentUser,
    request: Request,
    q: Annotated[SafeText, Query(min_length=1, max_length=500)],
    kind: Annotated[list[Kind] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 20,
) -> list[HitOut]:
    """Search the caller's messages, work log, notes, skills and facts."""
    semantic = getattr(request.app.state, "semantic", None)
    with database_of(request).read() as session:
        hits = search_memory(session, user.id, q, kinds=kind, limit=limit, semantic=semantic)
    return [HitOut(kind=h.kind, id=h.item_id, text=h.text, at=h.at, score=h.score) for h in hits]


@routes.get("/consolidations")
def list_consolidations(user: CurrentUser, request: Request) -> list[ConsolidationOut]:
    """Every consolidation of the caller's profile, newest first."""
    with database_of(request).read() as session:
        found = consolidations_of(session, user.id, limit=200)
    return [ConsolidationOut(**vars(c)) for c in found]


class ChangeOut(BaseModel):
    """One change to a fact, skill or note: its state before and after (null: it did not
    exist), who made it, from which turn and message, and that source's trust."""

    id: int
    kind: str  # fact | skill | note
    item_id: str
    action: str  # added | changed | archived | restored | removed | reverted
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    author: str  # owner | agent | memory_pass | upkeep
    turn_id: str | None
    conversation_id: str | None
    message_id: str | None
    trust: str
    created_at: datetime
    reverted_by: int | None  # the change that undid this one, if any

    @classmethod
    def of(cls, version: versions.Version) -> ChangeOut:
        return cls(**vars(version))


class RevertRequest(RequestBody):
    """Body of `POST /v1/memory/revert`: one change (its id), or everything one turn or one
    message wrote; exactly one of them."""

    change: int | None = Field(default=None, ge=1, le=2**63 - 1)
    turn_id: Id | None = None
    message_id: Id | None = None


@routes.get("/history")
def memory_history(
    user: CurrentUser,
    request: Request,
    item_id: Annotated[Id | None, Query(description="Only this fact, skill or note.")] = None,
    turn_id: Annotated[Id | None, Query(description="Only what this turn changed.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[ChangeOut]:
    """Every change to the caller's facts, skills and notes, newest first."""
    with database_of(request).read() as session:
        found = versions.history(session, user.id, item_id=item_id, turn_id=turn_id, limit=limit)
    return [ChangeOut.of(v) for v in found]


@routes.post("/revert", responses=error_responses(404))
def revert_memory(body: RevertRequest, user: CurrentUser, request: Request) -> list[ChangeOut]:
    """Undo one change, or everything one turn or one message wrote (newest first, all or
    nothing): each item goes back to its state before. 422 when an item changed since (undo
    the later change first) or there is nothing to undo. The reverts are changes too."""
    given = [body.change is not None, body.turn_id is not None, body.message_id is not None]
    if sum(given) != 1:
        one_of = "send exactly one of 'change', 'turn_id', 'message_id'"
        raise ApiError(422, "invalid_request", one_of)
    with database_of(request).write() as session:
        if body.change is not None:
            done = [versions.revert_change(session, user.id, body.change, facts.room_for)]
        else:
            done = versions.revert_source(
                session,
                user.id,
                turn_id=body.turn_id,
                message_id=body.message_id,
                room_for=facts.room_for,
            )
    return [ChangeOut.of(v) for v in done]
