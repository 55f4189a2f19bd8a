"""Long-lived connections end soon after their token is revoked: the change feed's SSE stream
and the live view's websocket each watch their token, and one query every `interval` seconds
checks every watched token of this process at once (however many connections are open)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from nightowl.store.database import Database
from nightowl.store.users import hash_token, live_token_hashes

log = logging.getLogger(__name__)
CHECK_INTERVAL_S = 2.0


class TokenWatch:
    """Tells each open stream when its token stops working (revoked, or its user deleted).
    Its check runs only while something is watched."""

    def __init__(self, database: Database, interval_s: float = CHECK_INTERVAL_S) -> None:
        self._database = database
        self._interval_s = interval_s
        self._watching: dict[str, set[asyncio.Event]] = {}
        self._checking: asyncio.Task[None] | None = None

    @contextmanager
    def watching(self, token: str) -> Iterator[asyncio.Event]:
        """An event set once `token` no longer works, for as long as the block runs (call it
        on the event loop)."""
        revoked = asyncio.Event()
        key = hash_token(token)
        self._watching.setdefault(key, set()).add(revoked)
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check_while_watched())
        try:
            yield revoked
        finally:
            events = self._watching.get(key, set())
            events.discard(revoked)
            if not events:
                self._watching.pop(key, None)

    async def _check_while_watched(self) -> None:
        while self._watching:
            await asyncio.sleep(self._interval_s)
            watched = list(self._watching)
            if not watched:
                break
            try:
                live = await asyncio.to_thread(self._live, watched)
            except Exception:  # the store is away for a moment: check again next time
                log.warning("could not check the open streams' tokens", exc_info=True)
                continue
            for key in watched:
                if key not in live:
                    for revoked in self._watching.get(key, ()):
                        revoked.set()

    def _live(self, watched: list[str]) -> set[str]:
        with self._database.read() as session:
            return live_token_hashes(session, watched)


def token_watch_of(app: Any) -> TokenWatch:
    """The application's token watch (made on first use, from its store)."""
    watch: TokenWatch | None = getattr(app.state, "token_watch", None)
    if watch is None:
        watch = app.state.token_watch = TokenWatch(app.state.database)
    return watch
