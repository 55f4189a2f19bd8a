"""A computer's placement on a computer host: one host at a time under a lease; a lapsed lease
(a dead host) is taken over, and a computer that sleeps may wake on any host at once. On
SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from nightowl.store.computers import (
    claim_placement,
    computer_of,
    placement_of,
    release_placement,
    renew_placements,
)
from nightowl.store.database import Database
from nightowl.store.migrate import upgrade
from nightowl.store.tables import Computer, utcnow
from nightowl.store.users import create_user
from tests.databases import BACKENDS, fresh_database

H1, H2 = "http://10.0.0.1:8790", "http://10.0.0.2:8790"


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    with fresh_database(request.param, tmp_path) as url:
        db = Database(url)
        upgrade(db)
        yield db
        db.dispose()


def _computer(database: Database) -> str:
    with database.write() as session:
        user = create_user(session, "someone").id
        computer_of(session, user, 3_000_000)
    return user


def test_a_live_hosts_computer_is_refused_to_another_host(database: Database) -> None:
    user = _computer(database)
    with database.write() as session:
        first = claim_placement(session, user, H1, 15)
    assert first is not None and first.host is None  # on no host before
    with database.write() as session:
        assert claim_placement(session, user, H2, 15) is None
        again = claim_placement(session, user, H1, 15)  # its own host renews
    assert again is not None and again.host == H1
    with database.read() as session:
        assert placement_of(session, user).host == H1


def test_a_dead_hosts_lapsed_lease_is_taken_over_and_says_from_whom(database: Database) -> None:
    user = _computer(database)
    with database.write() as session:
        claim_placement(session, user, H1, 15)
        session.execute(  # H1 stopped renewing a while ago
            update(Computer).values(host_until=utcnow() - timedelta(seconds=1))
        )
    with database.write() as session:
        taken = claim_placement(session, user, H2, 15)
        assert renew_placements(session, H1, 15) == 0  # H1, back, renews nothing of it
    assert taken is not None and taken.host == H1
    with database.read() as session:
        assert placement_of(session, user).host == H2


def test_a_computer_released_by_its_host_wakes_on_any_host_at_once(database: Database) -> None:
    user = _computer(database)
    with database.write() as session:
        claim_placement(session, user, H1, 15)
        release_placement(session, user, H2)  # not H2's to release
        assert placement_of(session, user).host == H1
        release_placement(session, user, H1)
    with database.write() as session:
        taken = claim_placement(session, user, H2, 15)
    assert taken is not None and taken.host is None
