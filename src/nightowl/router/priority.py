"""Turn priorities: a smaller number runs first (DBOS queue priority)."""

from enum import IntEnum


class Priority(IntEnum):
    """Who woke the conversation decides how soon its turn runs."""

    OWNER_DIRECT = 1
    GROUP = 2
    WEBHOOK = 3
    ROUTINE = 4
    TIMER = 5
    HELPER = 6


# Woken at once, without the batching window a burst (a group thread, a webhook storm) waits
# for: the owner's direct message, and a helper's report (one event, awaited by its parent).
AT_ONCE = frozenset({Priority.OWNER_DIRECT, Priority.HELPER})
