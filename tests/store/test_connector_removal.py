"""Removing a connector removes what its OAuth authorisation kept in the owner's vault (its
tokens and registered client), and nothing else: not another connector's, not another
owner's, not the owner's own secrets."""

from __future__ import annotations

from cryptography.fernet import Fernet
from sqlalchemy import select

from nightowl.safety.vault import set_secret
from nightowl.store.connectors import OAUTH_SECRETS, add_connector, drop_connector
from nightowl.store.database import Database
from nightowl.store.tables import SecretRow
from nightowl.store.users import create_user


def test_removing_a_connector_forgets_its_authorisation(database: Database) -> None:
    key = Fernet.generate_key()
    value = "x" * 32
    with database.write() as session:
        owner = create_user(session, "owner").id
        other = create_user(session, "other").id
        for user in (owner, other):
            add_connector(session, user, "crm", url="https://crm.example/mcp")
            add_connector(session, user, "crm2", url="https://crm2.example/mcp")
            for connector in ("crm", "crm2"):
                for part in OAUTH_SECRETS:
                    set_secret(session, key, user, f"connector.{connector}.{part}", value)
        set_secret(session, key, owner, "crm_api_key", value)
    with database.write() as session:
        drop_connector(session, owner, "crm")
    with database.read() as session:
        kept = {
            (row.owner_id, row.name)
            for row in session.scalars(select(SecretRow))
            if row.owner_id in (owner, other)
        }
    gone = {(owner, f"connector.crm.{part}") for part in OAUTH_SECRETS}
    assert not gone & kept
    assert {(owner, f"connector.crm2.{part}") for part in OAUTH_SECRETS} <= kept
    assert {(other, f"connector.crm.{part}") for part in OAUTH_SECRETS} <= kept
    assert (owner, "crm_api_key") in kept
