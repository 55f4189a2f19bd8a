"""Routines: scheduled prompts. Those the agent proposes stay inactive until the owner approves;
one proposed in a turn that read outside text fires as untrusted (approval does not change it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from nightowl.harness.done_when import DoneWhen
from nightowl.harness.firings import CATCH_UP, QUIET_HOURS, Firing, due_times
from nightowl.harness.watches import Watch
from nightowl.store.channels import list_channels
from nightowl.store.connectors import connectors_of
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import keyed_id, new_id
from nightowl.store.memory_versions import OWNER, Author, record, remove_recorded, snapshot
from nightowl.store.routine_firings import claim
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, Routine, User, utcnow
from nightowl.store.webhooks import owned_hook

STATUSES = ("pending_approval", "active", "paused")


@dataclass(frozen=True)
class RoutineInfo:
    """A routine as the owner and the engine see it."""

    id: str
    owner_id: str
    conversation_id: str
    name: str
    prompt: str
    cron: str
    timezone: str
    status: str
    created_by: str
    created_at: datetime
    last_fired_at: datetime | None
    trust: str = "owner"
    catch_up: str = "latest"  # latest | all | none: see harness/firings.py
    accounted_until: datetime | None = None  # the newest due time with an outcome
    watch: Watch | None = None  # checked without the model before each firing
    done_when: DoneWhen | None = None  # checked when a run's turn ends
    quiet_hours: str = "run"  # run | skip: inside the owner's quiet hours


def _info(row: Routine) -> RoutineInfo:
    return view_of(
        RoutineInfo,
        row,
        watch=Watch.model_validate(row.watch) if row.watch else None,
        done_when=DoneWhen.model_validate(row.done_when) if row.done_when else None,
    )


def validate_schedule(cron: str, timezone: str) -> None:
    """Raise Invalid, saying what to write instead, unless the cron and zone are usable."""
    fields = cron.split()
    if len(fields) not in (5, 6) or not croniter.is_valid(cron, second_at_beginning=True):
        raise Invalid(
            f"{cron!r} is not a cron expression; use five fields 'minute hour day month weekday' "
            "(e.g. '0 8 * * 1-5' for weekdays at 8:00), or six with seconds first"
        )
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise Invalid(
            f"{timezone!r} is not a time zone; use an IANA name such as 'Europe/Berlin' or 'UTC'"
        ) from None


def create_routine(
    session: Session,
    owner_id: str,
    conversation_id: str,
    *,
    name: str,
    prompt: str,
    cron: str,
    timezone: str,
    created_by: str,
    key: str | None = None,
    trust: str = "owner",
    catch_up: str = "latest",
    watch: Watch | None = None,
    done_when: DoneWhen | None = None,
    quiet_hours: str = "run",
    by: Author | None = None,
) -> RoutineInfo:
    """Store a routine: active when a person (owner or member) made it, pending approval when
    the agent did; its firings carry `trust` (`untrusted` for one the agent proposed in a turn
    that read outside text); once per `key` (a tool call run again after a crash finds the
    routine it made)."""
    validate_schedule(cron, timezone)
    if not name.strip() or len(name) > 200:
        raise Invalid("a routine needs a name of 1 to 200 characters")
    if not prompt.strip() or len(prompt) > 8_000:
        raise Invalid("a routine needs a prompt of 1 to 8,000 characters")
    if catch_up not in CATCH_UP:
        raise Invalid(
            f"catch_up must be one of {', '.join(CATCH_UP)} (what happens to due times missed "
            f"while the server was down), not {catch_up!r}"
        )
    if quiet_hours not in QUIET_HOURS:
        raise Invalid(
            f"quiet_hours must be one of {', '.join(QUIET_HOURS)} (whether it runs inside your "
            f"quiet hours), not {quiet_hours!r}"
        )
    conversation = session.get(Conversation, conversation_id)
    if conversation is None or conversation.owner_id != owner_id:
        raise NotFound(f"no conversation {conversation_id!r}")
    if watch is not None:
        watch = _watch_of_owner(session, owner_id, watch)
    routine_id = new_id("rtn") if key is None else keyed_id("rtn", key)
    if key is not None and (existing := session.get(Routine, routine_id)) is not None:
        return _info(existing)
    row = Routine(
        id=routine_id,
        owner_id=owner_id,
        conversation_id=conversation_id,
        name=name.strip(),
        prompt=prompt,
        cron=cron,
        timezone=timezone,
        status="pending_approval" if created_by == "agent" else "active",
        created_by=created_by,
        trust=trust,
        catch_up=catch_up,
        watch=watch.model_dump() if watch is not None else None,
        done_when=done_when.model_dump(exclude_none=True) if done_when is not None else None,
        quiet_hours=quiet_hours,
    )
    session.add(row)
    session.flush()
    by = by or Author(created_by, conversation_id=conversation_id, trust=trust)
    record(session, "routine", routine_id, owner_id, "added", None, snapshot(row), by)
    return _info(row)


def routine_trust(session: Session, routine: RoutineInfo) -> str:
    """The trust a routine's firing carries: untrusted when it was proposed from outside text,
    else its owner's role (a member's routine never speaks as the owner)."""
    if routine.trust == "untrusted":
        return "untrusted"
    role = session.scalar(select(User.role).where(User.id == routine.owner_id))
    return routine.trust if role == "owner" else "member"


def get_routine(session: Session, routine_id: str, owner_id: str | None = None) -> RoutineInfo:
    """One routine (of `owner_id`, when given)."""
    row = session.get(Routine, routine_id)
    if row is None or (owner_id is not None and row.owner_id != owner_id):
        raise NotFound(f"no routine {routine_id!r}")
    return _info(row)


def list_routines(session: Session, owner_id: str | None = None) -> list[RoutineInfo]:
    """Routines, oldest first (all owners' when `owner_id` is None)."""
    if owner_id is not None:  # every model call's profile reads them: prebuilt
        return [_info(row) for row in session.scalars(_ROUTINES_OF, {"owner_id": owner_id})]
    return [_info(row) for row in session.scalars(select(Routine).order_by(Routine.created_at))]


_ROUTINES_OF = (
    select(Routine).where(Routine.owner_id == bindparam("owner_id")).order_by(Routine.created_at)
)


def set_status(
    session: Session, routine_id: str, owner_id: str, status: str, now: datetime | None = None
) -> RoutineInfo:
    """Approve (→ active), pause or resume a routine. Becoming active starts its accounting
    now: due times before an approval were never due, and those of a pause are recorded as
    `skipped: paused` (never caught up)."""
    current = get_routine(session, routine_id, owner_id)
    if status == "paused" and current.status == "pending_approval":
        raise Invalid("this routine was never approved; approve or delete it")
    now = now or utcnow()
    if status == "active" and current.status == "paused":
        start = current.accounted_until or current.created_at
        paused = due_times(current.cron, current.timezone, start, now)
        skipped = [Firing(due, "skipped", "paused") for due in paused.listed]
        if paused.older:
            first = paused.listed[0] - timedelta(microseconds=1)
            skipped.insert(0, Firing(first, "skipped", f"paused ({paused.older:,} more)"))
        claim(session, routine_id, skipped)
    row = session.get(Routine, routine_id)
    assert row is not None
    before = snapshot(row)
    row.status = status
    if status == "active" and current.status != "active":
        row.accounted_until = now
    session.flush()
    if status != current.status:
        record(
            session, "routine", routine_id, row.owner_id, "changed", before, snapshot(row), OWNER
        )
    return get_routine(session, routine_id)


def delete_routine(session: Session, routine_id: str, owner_id: str) -> None:
    """Delete a routine (its versions keep it: a revert brings it back)."""
    row = session.get(Routine, routine_id)
    if row is None or row.owner_id != owner_id:
        raise NotFound(f"no routine {routine_id!r}")
    remove_recorded(session, "routine", row, owner_id)


def record_fired(session: Session, routine_id: str) -> None:
    """Note when the routine last woke its conversation."""
    session.execute(update(Routine).where(Routine.id == routine_id).values(last_fired_at=utcnow()))


def _watch_of_owner(session: Session, owner_id: str, watch: Watch) -> Watch:
    """The watch with what it reads through checked to be the owner's own: a webhook, an
    e-mail channel (named by id or name, or the only one; stored by id so a rename does not
    break it) or a connector. Invalid (what to give instead) otherwise."""
    if watch.kind == "webhook":
        owned_hook(session, owner_id, watch.target)
    elif watch.kind == "imap":
        mail = [c for c in list_channels(session, owner_id) if c.kind == "email"]
        chosen = [c for c in mail if watch.via in (c.id, c.name)] if watch.via else mail
        if len(chosen) != 1:
            listed = ", ".join(c.name for c in mail) or "none yet (`nightowl channels add`)"
            raise Invalid(
                f"an imap watch reads through one of your e-mail channels ({listed}): "
                + ("name it in via" if watch.via is None else f"{watch.via!r} is not one")
            )
        return watch.model_copy(update={"via": chosen[0].id})
    elif watch.kind == "resource":
        connectors = [c.name for c in connectors_of(session, owner_id)]
        if watch.via not in connectors:
            raise Invalid(
                "a resource watch asks one of your connectors "
                f"({', '.join(connectors) or 'none yet'})"
                f"; {watch.via!r} is not one"
            )
    return watch


def watch_state_of(session: Session, routine_id: str) -> str | None:
    """What the routine's watch saw at its last check (None before the first)."""
    return session.scalar(select(Routine.watch_state).where(Routine.id == routine_id))


def remember_watch(session: Session, routine_id: str, state: str) -> None:
    """Keep what the routine's watch saw, for the next check."""
    session.execute(update(Routine).where(Routine.id == routine_id).values(watch_state=state))
