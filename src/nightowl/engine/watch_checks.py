"""What a routine's watch sees (the comparison is harness/watches.py): a page fetched through
the same address checks as `web_fetch`, a file read from the owner's computer's home, a
webhook's deliveries counted in the store. No model is involved.

A page's text is outside content: the firing that reports its change hands it to the turn as
outside text (engine/routine_firings.py), never as the owner's words.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nightowl.harness.watches import Seen, Watch
from nightowl.store.database import Database
from nightowl.store.webhooks import deliveries_of
from nightowl.tools.pinned_fetch import FetchFailed, FetchRefused, PinnedFetcher
from nightowl.tools.web import page_text

MAX_FILE_BYTES = 5_000_000


class WatchFailed(Exception):
    """The check could not be made (the page did not answer, the path leaves the home): the
    firing fails with this reason."""


class WatchChecks:
    """Makes a watch's check for an owner."""

    def __init__(self, database: Database, homes_dir: Path, fetcher: PinnedFetcher) -> None:
        self._database = database
        self._homes = homes_dir
        self._fetcher = fetcher

    def see(self, owner_id: str, watch: Watch) -> Seen:
        """What the watched thing is now; WatchFailed when it cannot be seen."""
        if watch.kind == "url":
            return self._page(watch.target)
        if watch.kind == "file":
            return self._file(owner_id, watch.target)
        return self._deliveries(watch.target)

    def _page(self, url: str) -> Seen:
        try:
            page = asyncio.run(self._fetcher.get(url))
        except (FetchRefused, FetchFailed) as error:
            raise WatchFailed(f"{url} could not be checked: {error}") from error
        if page.status >= 400:
            raise WatchFailed(f"{url} answered HTTP {page.status}")
        return Seen(text=page_text(page.text(), page.content_type))

    def _file(self, owner_id: str, relative: str) -> Seen:
        home = (self._homes / owner_id).resolve()
        path = (home / relative).resolve()
        if not path.is_relative_to(home):  # a link that leads out of the home
            raise WatchFailed(f"{relative} leads outside the computer's home")
        if not path.exists():
            return Seen(missing=True)
        if not path.is_file():
            raise WatchFailed(f"{relative} is not a file")
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise WatchFailed(f"{relative} is larger than {MAX_FILE_BYTES:,} bytes")
        return Seen(text=data.decode("utf-8", "replace"))

    def _deliveries(self, hook_id: str) -> Seen:
        with self._database.read() as session:
            count, newest = deliveries_of(session, hook_id)
        return Seen(text=newest, count=count)
