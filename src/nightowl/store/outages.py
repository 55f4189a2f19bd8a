"""The database gone for a while (a PostgreSQL restart or failover): how to tell, and how to
wait it out.

DBOS blocks and retries its own history writes until the connection is back; the app store's
transactions do the same here, so a turn, helper, timer, routine, compaction, memory pass or
channel delivery in flight pauses through a restart instead of failing. A transaction cut off
by a lost connection rolled back, so running it again is safe; every step that goes through
here writes under keys of its own (a message key, the turn's status, a recorded step result),
so the rare commit whose acknowledgement was lost is not doubled when run again.

One policy, three shapes: `through_outages` runs one blocking transaction again,
`outlast` does that in a worker thread for the event loop, and `waits_out_outages` runs a
whole async step again (for steps whose parts are each idempotent: a model call recorded
under its place, a send recorded before it is made). An API request is not retried here: it
answers 503 and the client retries it with the same `client_id` (api/errors.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import ParamSpec, TypeVar

import psycopg
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)
T = TypeVar("T")
P = ParamSpec("P")
LONGEST_WAIT_S = 2.0

# SQLSTATE classes and codes of a connection that is gone or not yet possible: connection
# exceptions (08…), insufficient resources (53…), and a server shutting down or starting up
# (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now).
_LOST_CODES = ("08", "53", "57P01", "57P02", "57P03")


def lost_connection(error: BaseException) -> bool:
    """Whether `error` says the database connection was lost or could not be made."""
    if isinstance(error, DBAPIError):
        if error.connection_invalidated:
            return True
        error = error.orig  # type: ignore[assignment]
    if not isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    code = error.sqlstate or ""
    return not code or code.startswith(_LOST_CODES)


def _waits(longest_wait_s: float) -> Iterator[float]:
    """The pauses between tries: 0.1 s, doubling up to `longest_wait_s`, for as long as it
    takes (the database is expected back; DBOS itself waits as long)."""
    wait = 0.1
    while True:
        yield wait
        wait = min(wait * 2, longest_wait_s)


def _waiting(error: Exception, wait: float) -> None:
    """Re-raise `error` unless the connection was lost; otherwise say that we wait."""
    if not lost_connection(error):
        raise error
    log.warning("the database is unreachable; waiting for it", extra={"wait_s": wait})


def through_outages(work: Callable[[], T], longest_wait_s: float = LONGEST_WAIT_S) -> T:
    """Run `work` (one transaction, blocking), again and again while the database is away."""
    for wait in _waits(longest_wait_s):
        try:
            return work()
        except Exception as error:
            _waiting(error, wait)
        time.sleep(wait)
    raise AssertionError("unreachable")  # _waits never ends


async def outlast(work: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`through_outages` in a worker thread: a blocking transaction, from the event loop."""
    return await asyncio.to_thread(through_outages, functools.partial(work, *args, **kwargs))


def waits_out_outages(step: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Run the async `step` again, whole, while the database is away: for a step each of
    whose parts may run again (see the module docstring)."""

    @functools.wraps(step)
    async def waiting(*args: P.args, **kwargs: P.kwargs) -> T:
        for wait in _waits(LONGEST_WAIT_S):
            try:
                return await step(*args, **kwargs)
            except Exception as error:
                _waiting(error, wait)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # _waits never ends

    return waiting
