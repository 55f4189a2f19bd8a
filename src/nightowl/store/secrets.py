"""The secrets table: sealed values (the vault encrypts and opens them) and allowed hosts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from nightowl.store.errors import NotFound
from nightowl.store.ids import new_id
from nightowl.store.tables import SecretRow, utcnow


@dataclass(frozen=True)
class SecretInfo:
    """A secret as anyone may see it: its name and allowed hosts, never its value."""

    name: str
    allowed_hosts: list[str]
    updated_at: datetime


def _info(row: SecretRow) -> SecretInfo:
    return SecretInfo(row.name, list(row.allowed_hosts or []), row.updated_at)


def _row(session: Session, owner_id: str, name: str) -> SecretRow | None:
    return session.scalar(
        select(SecretRow).where(SecretRow.owner_id == owner_id, SecretRow.name == name)
    )


def put_sealed(
    session: Session, owner_id: str, name: str, ciphertext: str, allowed_hosts: list[str] | None
) -> bool:
    """Store or replace a sealed secret; True when it was new. `allowed_hosts` None keeps a
    replaced secret's hosts (a new one gets none)."""
    row = _row(session, owner_id, name)
    if row is None:
        session.add(
            SecretRow(
                id=new_id("sec"),
                owner_id=owner_id,
                name=name,
                ciphertext=ciphertext,
                allowed_hosts=list(allowed_hosts or []),
            )
        )
        return True
    row.ciphertext, row.updated_at = ciphertext, utcnow()
    if allowed_hosts is not None:
        row.allowed_hosts = list(allowed_hosts)
    return False


def set_hosts(session: Session, owner_id: str, name: str, allowed_hosts: list[str]) -> SecretInfo:
    """Replace a secret's allowed hosts (NotFound when there is no such secret)."""
    row = _row(session, owner_id, name)
    if row is None:
        raise NotFound(f"no secret named {name!r}")
    row.allowed_hosts, row.updated_at = list(allowed_hosts), utcnow()
    session.flush()
    return _info(row)


def secrets_of(session: Session, owner_id: str) -> list[SecretInfo]:
    """Every secret of the owner, sorted by name (never the values)."""
    rows = session.scalars(
        select(SecretRow).where(SecretRow.owner_id == owner_id).order_by(SecretRow.name)
    )
    return [_info(row) for row in rows]


def sealed_of(session: Session, owner_id: str) -> list[tuple[str, str]]:
    """(name, ciphertext) of every secret of the owner."""
    rows = session.execute(_SEALED_OF, {"owner_id": owner_id}).all()
    return [(row[0], row[1]) for row in rows]


# Prebuilt: every tool call reads them.
_SEALED_OF = select(SecretRow.name, SecretRow.ciphertext).where(
    SecretRow.owner_id == bindparam("owner_id")
)


def drop_secret(session: Session, owner_id: str, name: str) -> None:
    """Delete a secret (NotFound when there is none by that name)."""
    gone = session.execute(
        delete(SecretRow).where(SecretRow.owner_id == owner_id, SecretRow.name == name)
    )
    if not gone.rowcount:  # type: ignore[attr-defined]
        raise NotFound(f"no secret named {name!r}")
