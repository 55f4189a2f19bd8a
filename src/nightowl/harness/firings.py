"""What becomes of a routine's due times (pure: the clock and the stored state are passed in).

Every due time of an active routine gets one outcome: `ran` (it woke the conversation),
`skipped` (with the reason) or `failed` (why). A due time that passed without a firing — the
server was down, its scheduler stalled, the clock jumped — is *missed*, and the routine's
`catch_up` policy says what happens to the missed ones:

- `latest` (default): one firing stands for all of them and is told how many were missed;
  the others are `skipped: superseded`.
- `all`: each missed due time fires, oldest first, each told it is late.
- `none`: each is `skipped: missed`; the routine goes on at its next due time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

CATCH_UP = ("latest", "all", "none")
# What a due time inside the owner's quiet hours does: `run` (its messages wait for the
# quiet hours to end, like every push) or `skip` (recorded as `skipped: quiet hours …`).
QUIET_HOURS = ("run", "skip")
OUTCOMES = ("pending", "ran", "skipped", "failed")
# A due time this much older than the firing at hand, and not fired, was missed while the
# server ran (a stalled scheduler, a clock that jumped); younger ones may still be on their way.
GRACE = timedelta(seconds=60)
# Due times recorded one by one per catch-up; older ones are counted in one row.
MAX_RECORDED = 1_000
# Due times counted at most when a long outage is caught up (a per-second routine down for
# hours): counting them takes about a second.
MAX_COUNTED = 10_000


@dataclass(frozen=True)
class Firing:
    """One due time's planned outcome. `pending` firings are to be run; `missed` says how many
    missed due times a `latest` catch-up firing stands for; `late` marks a missed due time
    fired on its own (`all`)."""

    due: datetime
    outcome: str
    reason: str = ""
    missed: int = 0
    late: bool = False

    def notice(self) -> str:
        """What the firing's message says about being late ("" when on time)."""
        if self.missed:
            more = "+" if self.missed >= MAX_COUNTED else ""
            return (
                f" [Caught up: {self.missed:,}{more} due time(s) of this routine passed while it "
                "could not run (the server was down or busy); this one firing stands for them.]"
            )
        if self.late:
            return " [Late: this due time passed while the routine could not run.]"
        return ""


@dataclass(frozen=True)
class DueTimes:
    """The due times in a window, oldest first: the newest `MAX_RECORDED` listed, and how many
    older ones there were besides (counted up to `MAX_COUNTED`)."""

    listed: tuple[datetime, ...]
    older: int = 0

    @property
    def count(self) -> int:
        return len(self.listed) + self.older


def due_times(cron: str, timezone: str, after: datetime, until: datetime) -> DueTimes:
    """The routine's due times in (`after`, `until`], in UTC, oldest first."""
    if until <= after:
        return DueTimes(())
    zone = ZoneInfo(timezone)
    newest: list[datetime] = []
    older = 0
    for due in _backwards(cron, zone, until):
        if due <= after:
            break
        if len(newest) < MAX_RECORDED:
            newest.append(due)
        else:
            older += 1
            if len(newest) + older >= MAX_COUNTED:
                break
    return DueTimes(tuple(reversed(newest)), older)


def _backwards(cron: str, zone: ZoneInfo, until: datetime) -> Iterator[datetime]:
    # croniter's get_prev is strictly before its start: start just after `until` to include it.
    start = until.astimezone(zone) + timedelta(microseconds=1)
    times = croniter(cron, start, second_at_beginning=True)
    while True:
        yield times.get_prev(datetime).astimezone(UTC)


def plan(missed: DueTimes, current: datetime | None, policy: str) -> list[Firing]:
    """The outcome of each missed due time and of the one at hand (`current`, None when only
    catching up), oldest first."""
    if policy not in CATCH_UP:
        raise ValueError(f"catch_up must be one of {', '.join(CATCH_UP)}, not {policy!r}")
    late = list(missed.listed)
    firings: list[Firing] = []
    if missed.older:
        firings.append(
            Firing(late[0] - timedelta(microseconds=1), "skipped", _older(missed.older, policy))
        )
    if policy == "all":
        firings += [Firing(due, "pending", late=True) for due in late]
    elif policy == "none":
        reason = "missed: it could not run at its time (catch_up none)"
        firings += [Firing(due, "skipped", reason) for due in late]
    elif late:  # latest: the newest due time stands for the others
        stand_in = current if current is not None else late[-1]
        superseded = late if current is not None else late[:-1]
        reason = f"superseded: caught up by the firing due {stand_in.isoformat()}"
        firings += [Firing(due, "skipped", reason) for due in superseded]
        if current is None:
            firings.append(Firing(late[-1], "pending", missed=missed.count))
    if current is not None:
        stood_for = missed.count if policy == "latest" else 0
        firings.append(Firing(current, "pending", missed=stood_for))
    return firings


def _older(count: int, policy: str) -> str:
    more = "+" if count + MAX_RECORDED >= MAX_COUNTED else ""
    return (
        f"missed: {count:,}{more} older due times passed while it could not run, "
        f"too many to list (catch_up {policy})"
    )
