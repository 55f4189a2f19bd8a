"""Watches on the owner's other sources (SQLite and PostgreSQL): a folder of their e-mail
channel on a real IMAP server (pymap), examined read-only, runs a firing only for new mail and
names each; a connector's resource (a real MCP server over streamable HTTP) runs one only when
it changed, with the diff; a file in a computer that is asleep is not looked at and counts as
unchanged. What each says reaches the turn as outside text."""

from __future__ import annotations

import imaplib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select, update

from nightowl.engine.routine_firings import RoutineFirings
from nightowl.engine.watch_checks import WatchChecks
from nightowl.harness.watches import Watch
from nightowl.router.router import Router
from nightowl.safety.vault import set_secret
from nightowl.store.channels import add_channel
from nightowl.store.computers import computer_of, record_sleep
from nightowl.store.connectors import add_connector
from nightowl.store.conversations import create_conversation
from nightowl.store.database import Database
from nightowl.store.errors import Invalid
from nightowl.store.routines import create_routine, get_routine
from nightowl.store.tables import ModelCall, Routine
from nightowl.store.users import ensure_owner
from nightowl.tools.mcp.connections import Connections
from nightowl.tools.mcp.http import HttpTransports
from nightowl.tools.pinned_fetch import AddressPolicy, PinnedFetcher
from tests.channels.servers import MailServer, ensure_installed, mail
from tests.engine.test_routine_watches import EVERY_5, T0, _messages, _outcomes
from tests.store.test_store import RecordingQueue
from tests.tools.mcp.oauth_server import OAuthMcpServer

KEY = Fernet.generate_key()  # the test vault's key
BOT_PASSWORD = "bot-mail-password-0123456789"


@pytest.fixture
def mailserver(tmp_path: Path) -> Iterator[MailServer]:
    ensure_installed()
    server = MailServer(tmp_path / "mail", {"bot": BOT_PASSWORD}).start()
    try:
        yield server
    finally:
        server.stop()


def _owner_and_conversation(database: Database) -> tuple[str, str]:
    with database.write() as session:
        owner = ensure_owner(session)
        return owner.id, create_conversation(session, owner.id).id


def _routine(database: Database, owner: str, conversation: str, watch: Watch) -> str:
    with database.write() as session:
        routine = create_routine(
            session,
            owner,
            conversation,
            name="watch",
            prompt="tell me what is new",
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
        return routine.id


def _firings(database: Database, homes: Path, **parts: object) -> RoutineFirings:
    router = Router(database, RecordingQueue())
    fetcher = PinnedFetcher(AddressPolicy(allow_private=True))
    checks = WatchChecks(database, homes, fetcher, **parts)  # type: ignore[arg-type]
    return RoutineFirings(database, router, lambda: T0 + timedelta(days=2), checks)


def _mail_channel(database: Database, owner: str, server: MailServer, name: str = "mail") -> str:
    settings = {
        "address": "bot@example.test",
        "owner": "owner@example.test",
        "username": "bot",
        "password_secret": "MAIL_PASSWORD",
        "imap_host": "127.0.0.1",
        "imap_port": server.imap_port,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "smtp_port": server.smtp_port,
        "smtp_security": "none",
    }
    with database.write() as session:
        set_secret(session, KEY, owner, "MAIL_PASSWORD", BOT_PASSWORD)
        return add_channel(session, owner, name, "email", settings).id


def _unseen(server: MailServer) -> int:
    imap = imaplib.IMAP4("127.0.0.1", server.imap_port, timeout=10)
    try:
        imap.login("bot", BOT_PASSWORD)
        imap.select("INBOX", readonly=True)
        _, data = imap.uid("SEARCH", None, "UNSEEN")
        return len((data[0] or b"").split())
    finally:
        imap.logout()


def test_an_imap_watch_runs_only_for_new_mail_and_names_each(
    database: Database, mailserver: MailServer, tmp_path: Path
) -> None:
    owner, conversation = _owner_and_conversation(database)
    channel_id = _mail_channel(database, owner, mailserver)
    mailserver.send(mail("old@example.test", "bot@example.test", "Before", "x", "<old@x>"))
    # The owner's only e-mail channel is the one read; it is stored by id.
    routine_id = _routine(database, owner, conversation, Watch(kind="imap", target="INBOX"))
    with database.read() as session:
        stored = get_routine(session, routine_id).watch
    assert stored is not None and stored.via == channel_id
    firings = _firings(database, tmp_path, vault_key=KEY)
    due = [T0 + timedelta(minutes=m) for m in range(5, 40, 5)]
    assert [firings.fire_due(routine_id, d) for d in due[:2]] == [0, 0]
    assert _outcomes(database, routine_id)[0][1].startswith("nothing changed: first check")
    assert _outcomes(database, routine_id)[1] == ("skipped", "nothing changed")
    assert _messages(database, routine_id) == []

    for n, subject in enumerate(["Release 2.4 is out", "Your invoice for November"]):
        sender = f"news{n}@lists.example.test"
        mailserver.send(mail(sender, "bot@example.test", subject, "body", f"<new{n}@x>"))
    assert firings.fire_due(routine_id, due[2]) == 1
    [(notice_trust, notice), (change_trust, change)] = _messages(database, routine_id)
    assert notice_trust == "owner" and "Its watch saw a change" in notice
    assert change_trust == "untrusted"  # senders and subjects are outside text
    assert change.startswith("What changed in the mail folder INBOX:\n2 new mail(s) in INBOX:")
    assert "- from news0@lists.example.test: Release 2.4 is out" in change
    assert "- from news1@lists.example.test: Your invoice for November" in change
    assert "Before" not in change  # what was there at the first check is not new
    assert firings.fire_due(routine_id, due[3]) == 0
    assert _outcomes(database, routine_id)[-1] == ("skipped", "nothing changed")
    # Examined read-only: the owner's mail is still unread.
    assert _unseen(mailserver) == 3
    with database.read() as session:
        assert session.scalar(select(func.count()).select_from(ModelCall)) == 0


def test_an_imap_watch_on_a_missing_folder_fails_with_why(
    database: Database, mailserver: MailServer, tmp_path: Path
) -> None:
    owner, conversation = _owner_and_conversation(database)
    _mail_channel(database, owner, mailserver)
    watch = Watch(kind="imap", target="Lists/none-such", via="mail")
    routine_id = _routine(database, owner, conversation, watch)
    assert _firings(database, tmp_path, vault_key=KEY).fire_due(routine_id, T0) == 0
    [(outcome, reason)] = _outcomes(database, routine_id)
    assert outcome == "failed"
    assert reason.startswith("the watch failed: Lists/none-such could not be checked:")
    assert "no folder 'Lists/none-such'" in reason


def test_an_imap_watch_reads_only_through_the_owners_email_channel(
    database: Database, mailserver: MailServer
) -> None:
    owner, conversation = _owner_and_conversation(database)
    with pytest.raises(Invalid, match=r"e-mail channels \(none yet"):
        _routine(database, owner, conversation, Watch(kind="imap", target="INBOX"))
    _mail_channel(database, owner, mailserver, "work")
    _mail_channel(database, owner, mailserver, "home")
    with pytest.raises(Invalid, match="name it in via"):  # two: which one?
        _routine(database, owner, conversation, Watch(kind="imap", target="INBOX"))
    with pytest.raises(Invalid, match="'nope' is not one"):
        _routine(database, owner, conversation, Watch(kind="imap", target="INBOX", via="nope"))
    with database.read() as session:
        assert session.scalar(select(func.count()).select_from(Routine)) == 0
    for bad in ('Say "hi"', "Entwürfe", "a\tb", "x" * 201):
        with pytest.raises(ValueError):
            Watch(kind="imap", target=bad)
    with pytest.raises(ValueError, match="takes no via"):
        Watch(kind="url", target="https://example.com/", via="mail")


def test_a_resource_watch_runs_only_when_the_resource_changed(
    database: Database, tmp_path: Path
) -> None:
    owner, conversation = _owner_and_conversation(database)
    with OAuthMcpServer(oauth=False, note="water the plants.") as notes:
        with database.write() as session:
            add_connector(session, owner, "notes", url=notes.url)
        with pytest.raises(Invalid, match="'other' is not one"):
            watch = Watch(kind="resource", target="notes://latest", via="other")
            _routine(database, owner, conversation, watch)
        watch = Watch(kind="resource", target="notes://latest", via="notes")
        routine_id = _routine(database, owner, conversation, watch)
        connections = Connections(open_http=HttpTransports(database, KEY).open)
        firings = _firings(database, tmp_path, connections=connections)
        due = [T0 + timedelta(minutes=m) for m in range(5, 30, 5)]
        assert [firings.fire_due(routine_id, d) for d in due[:2]] == [0, 0]
        assert _outcomes(database, routine_id)[1] == ("skipped", "nothing changed")
        notes.note = "call the plumber about the leak."
        assert firings.fire_due(routine_id, due[2]) == 1
        change = _messages(database, routine_id)[-1]
        assert change[0] == "untrusted"
        assert change[1].startswith(
            "What changed in the resource notes://latest of the connector notes:"
        )
        assert "-water the plants.\n+call the plumber about the leak." in change[1]
        assert firings.fire_due(routine_id, due[3]) == 0
        # A resource the server does not have fails the firing with the server's answer.
        missing = Watch(kind="resource", target="notes://nothing", via="notes")
        other = _routine(database, owner, conversation, missing)
        assert firings.fire_due(other, due[0]) == 0
        [(outcome, reason)] = _outcomes(database, other)
        assert outcome == "failed"
        assert reason.startswith("the watch failed: notes://nothing could not be read:")


def test_a_file_watch_on_a_sleeping_computer_counts_as_unchanged_without_waking_it(
    database: Database, tmp_path: Path
) -> None:
    owner, conversation = _owner_and_conversation(database)
    home = tmp_path / owner
    home.mkdir()
    (home / "todo.md").write_text("- buy milk\n")
    routine_id = _routine(database, owner, conversation, Watch(kind="file", target="todo.md"))
    firings = _firings(database, tmp_path)
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=5)) == 0  # recorded
    # Deep sleep: the home lives only in a snapshot, and its folder is gone from the disk.
    with database.write() as session:
        computer_of(session, owner, 20_000)
        record_sleep(session, owner, "sha256:0", 10)
    (home / "todo.md").unlink()
    home.rmdir()
    assert firings.fire_due(routine_id, T0 + timedelta(minutes=10)) == 0
    assert _outcomes(database, routine_id)[-1] == (
        "skipped",
        "nothing changed: the computer is asleep (nothing in it runs until it wakes)",
    )
    assert _messages(database, routine_id) == [] and not home.exists()
