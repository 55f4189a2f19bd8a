"""A routine gated by a watch (SQLite and PostgreSQL): a page on a local test server that does
not change skips every firing with no message and no model call; when it changes, the firing
wakes the conversation with the routine's notice and the diff as outside text. A file watch
stays in its home, a webhook watch counts deliveries, and a page the address policy refuses
fails the firing with why."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from nightowl.engine.routine_firings import RoutineFirings
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.watches import Watch
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.conversations import create_conversation, messages_after
from nightowl.store.database import Database
from nightowl.store.errors import NotFound
from nightowl.store.routine_firings import firings_of
from nightowl.store.routines import create_routine, get_routine
from nightowl.store.tables import ModelCall, Routine
from nightowl.store.users import create_user, ensure_owner
from nightowl.store.webhooks import create_hook
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher
from tests.store.test_store import RecordingQueue

T0 = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
EVERY_5 = "*/5 * * * *"


class Page:
    """A page on 127.0.0.1 whose text the test changes; counts the requests it answered."""

    def __init__(self) -> None:
        self.text = "<html><body><p>All systems go.</p><p>Queue: 0</p></body></html>"
        self.requests = 0
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                page.requests += 1
                body = page.text.encode()
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/status"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def page() -> Iterator[Page]:
    served = Page()
    yield served
    served.server.shutdown()
    served.server.server_close()


def _routine(database: Database, watch: Watch) -> tuple[str, str]:
    with database.write() as session:
        owner = ensure_owner(session)
        conversation = create_conversation(session, owner.id)
        routine = create_routine(
            session,
            owner.id,
            conversation.id,
            name="status",
            prompt="tell me what changed on the status page",
            cron=EVERY_5,
            timezone="UTC",
            created_by="owner",
            watch=watch,
        )
        session.execute(
            update(Routine)
            .where(Routine.id == routine.id)
            .values(accounted_until=T0, created_at=T0 - timedelta(days=1))
        )
        return routine.id, owner.id


def _firings(database: Database, homes: Path, allow_private: bool = True) -> RoutineFirings:
    router = Router(database, RecordingQueue())
    fetcher = PinnedFetcher(AddressPolicy(allow_private=allow_private))
    checks = WatchChecks(database, homes, fetcher)
    return RoutineFirings(database, router, lambda: T0 + timedelta(days=2), checks)


def _outcomes(database: Database, routine_id: str) -> list[tuple[str, str]]:
    with database.read() as session:
        return [(f.outcome, f.reason) for f in reversed(firings_of(session, routine_id))]


def _messages(database: Database, routine_id: str) -> list[tuple[str, str]]:
    with database.read() as session:
        conversation_id = get_routine(session, routine_id).conversation_id
        return [(m.trust, m.body) for m in messages_after(session, conversation_id, 0)]


def test_an_unchanged_page_skips_with_no_model_call_and_a_change_brings_the_diff(
    database: Database, page: Page, tmp_path: Path
) -> None:
    routine_id, _ = _routine(database, Watch(kind="url", target=page.url))
    firings = _firings(database, tmp_path)
    due = [T0 + timedelta(minutes=m) for m in (5, 10, 15, 20)]
    assert [firings.fire_due(routine_id, d) for d in due[:3]] == [0, 0, 0]
    assert page.requests == 3
    assert _messages(database, routine_id) == []  # nothing for a model to read
    with database.read() as session:
        assert session.scalar(select(func.count()).select_from(ModelCall)) == 0
    assert [o for o, _ in _outcomes(database, routine_id)] == ["skipped"] * 3
    assert _outcomes(database, routine_id)[0][1].startswith("nothing changed: first check")
    assert _outcomes(database, routine_id)[1][1] == "nothing changed"

    page.text = page.text.replace("Queue: 0", "Queue: 41 jobs stuck")
    assert firings.fire_due(routine_id, due[3]) == 1
    [(notice_trust, notice), (change_trust, change)] = _messages(database, routine_id)
    assert notice.startswith("Routine 'status'") and "Its watch saw a change" in notice
    assert notice_trust == "owner"
    # The page's words are outside text, never the owner's.
    assert change_trust == "untrusted"
    assert change.startswith(f"What changed in the page {page.url}:")
    assert "-All systems go. Queue: 0\n+All systems go. Queue: 41 jobs stuck" in change
    assert _outcomes(database, routine_id)[-1] == ("ran", "")
    # The same due time again (a redelivery): neither the check's memory nor the messages move.
    assert firings.fire_due(routine_id, due[3]) == 0
    assert len(_messages(database, routine_id)) == 2
    # Unchanged since the change: skipped again.
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=25)) == 0
    assert _outcomes(database, routine_id)[-1] == ("skipped", "nothing changed")


def test_a_page_the_address_policy_refuses_fails_the_firing_with_why(
    database: Database, page: Page, tmp_path: Path
) -> None:
    # Loopback stands in for a private address: with private fetches off (the default), the
    # refusal must hold before any packet — were it broken, the request would reach `page`.
    routine_id, _ = _routine(database, Watch(kind="url", target=page.url))
    firings = _firings(database, tmp_path, allow_private=False)
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=5)) == 0
    [(outcome, reason)] = _outcomes(database, routine_id)
    assert outcome == "failed"
    assert reason.startswith(f"the watch failed: {page.url} could not be checked")
    assert "private or local address" in reason
    assert page.requests == 0 and _messages(database, routine_id) == []


def test_a_file_watch_reads_in_its_home_only(database: Database, tmp_path: Path) -> None:
    routine_id, owner = _routine(database, Watch(kind="file", target="reports/today.md"))
    home = tmp_path / owner
    (home / "reports").mkdir(parents=True)
    firings = _firings(database, tmp_path)
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=5)) == 0  # missing: recorded
    (home / "reports" / "today.md").write_text("# Today\n- nothing yet\n")
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=10)) == 1
    assert "+# Today" in _messages(database, routine_id)[-1][1]
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=15)) == 0
    # A link that leads out of the home is refused, not followed.
    (tmp_path / "elsewhere.txt").write_text("the owner's other files")
    (home / "reports" / "today.md").unlink()
    (home / "reports" / "today.md").symlink_to(tmp_path / "elsewhere.txt")
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=20)) == 0
    assert _outcomes(database, routine_id)[-1] == (
        "failed",
        "the watch failed: reports/today.md leads outside the computer's home",
    )


def test_a_webhook_watch_runs_only_after_new_deliveries(database: Database, tmp_path: Path) -> None:
    with database.write() as session:
        hook, _ = create_hook(session, ensure_owner(session).id, "ci")
    routine_id, _ = _routine(database, Watch(kind="webhook", target=hook.id))
    router = Router(database, RecordingQueue())
    firings = _firings(database, tmp_path)
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=5)) == 0
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=10)) == 0
    for n in range(3):
        router.accept(
            IncomingMessage(
                source="webhook",
                idempotency_key=f"{hook.id}:delivery-{n}",
                conversation_id=hook.conversation_id,
                text=f"build {n} failed",
                trust="untrusted",
                priority=Priority.WEBHOOK,
            )
        )
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=15)) == 1
    assert _messages(database, routine_id)[-1][1].endswith(
        "3 new delivery(ies) since the last check"
    )


def test_a_watch_on_someone_elses_webhook_is_refused(database: Database) -> None:
    with database.write() as session:
        owner = ensure_owner(session)
        member = create_user(session, "bob")
        theirs, _ = create_hook(session, member.id, "bob's builds")
        conversation = create_conversation(session, owner.id)
    for target in (theirs.id, "hook_nobody"):
        with database.write() as session, pytest.raises(NotFound, match=f"no webhook '{target}'"):
            create_routine(
                session,
                owner.id,
                conversation.id,
                name="x",
                prompt="y",
                cron=EVERY_5,
                timezone="UTC",
                created_by="owner",
                watch=Watch(kind="webhook", target=target),
            )
    with database.read() as session:
        assert session.scalar(select(func.count()).select_from(Routine)) == 0
    for bad in ("hook one", "a" * 65, "\ud800"):
        with pytest.raises(ValueError):
            Watch(kind="webhook", target=bad)
