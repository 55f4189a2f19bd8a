"""Users and their access tokens (stored as SHA-256 hashes, shown once at creation)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import AccessToken, User, utcnow

TOKEN_PREFIX = "nwl_"


def hash_token(token: str) -> str:
    """The stored form of a token. Tokens are 256-bit random, so a plain hash is enough."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class UserInfo:
    """A user as the rest of the server sees it."""

    id: str
    name: str
    role: str


@dataclass(frozen=True)
class TokenInfo:
    """A token's metadata; the secret itself is never stored."""

    id: str
    user_name: str
    name: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def _info(user: User) -> UserInfo:
    return UserInfo(id=user.id, name=user.name, role=user.role)


def ensure_owner(session: Session, name: str = "owner") -> UserInfo:
    """The server's owner, created on first use."""
    owner = session.scalar(select(User).where(User.role == "owner"))
    if owner is None:
        owner = User(id=new_id("usr"), name=name, role="owner")
        session.add(owner)
        session.flush()
    return _info(owner)


def create_user(session: Session, name: str, role: str = "member") -> UserInfo:
    """Add a person; names are unique."""
    if role not in {"owner", "member"}:
        raise Invalid(f"role must be 'owner' or 'member', not {role!r}")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise Invalid(f"a user named {name!r} already exists")
    user = User(id=new_id("usr"), name=name, role=role)
    session.add(user)
    session.flush()
    return _info(user)


def find_user(session: Session, name: str) -> UserInfo:
    """The user with this name."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise NotFound(f"no user named {name!r}")
    return _info(user)


def create_token(session: Session, user_id: str, name: str) -> tuple[TokenInfo, str]:
    """A new token for the user; the secret is returned once and only its hash is kept."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = AccessToken(id=new_id("tok"), user_id=user_id, name=name, token_hash=hash_token(secret))
    session.add(row)
    session.flush()
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"no user with id {user_id!r}")
    return _token_info(row, user.name), secret


def _token_info(row: AccessToken, user_name: str) -> TokenInfo:
    return view_of(TokenInfo, row, user_name=user_name)


def user_for_token(session: Session, secret: str) -> UserInfo | None:
    """The user a live (unrevoked) token belongs to, or None."""
    # Columns, not entities: this runs on every request, and ORM objects cost more than the query.
    row = session.execute(
        select(User.id, User.name, User.role)
        .join(AccessToken, AccessToken.user_id == User.id)
        .where(AccessToken.token_hash == hash_token(secret), AccessToken.revoked_at.is_(None))
    ).first()
    return None if row is None else UserInfo(id=row.id, name=row.name, role=row.role)


def live_token_hashes(session: Session, token_hashes: list[str]) -> set[str]:
    """Which of these token hashes belong to live (unrevoked) tokens."""
    if not token_hashes:
        return set()
    rows = session.scalars(
        select(AccessToken.token_hash).where(
            AccessToken.token_hash.in_(token_hashes), AccessToken.revoked_at.is_(None)
        )
    )
    return set(rows)


def token_is_live(session: Session, secret: str) -> bool:
    """Whether this secret is a known, unrevoked token."""
    return user_for_token(session, secret) is not None


def list_tokens(session: Session) -> list[TokenInfo]:
    """Every token (revoked ones too), oldest first."""
    rows = session.execute(
        select(AccessToken, User.name)
        .join(User, User.id == AccessToken.user_id)
        .order_by(AccessToken.created_at)
    ).all()
    return [_token_info(token, user_name) for token, user_name in rows]


def revoke_token(session: Session, token_id: str) -> TokenInfo:
    """Revoke a token by id; a revoked token stops working at once."""
    row = session.get(AccessToken, token_id)
    if row is None:
        raise NotFound(f"no token with id {token_id!r}; `nightowl token list` shows the ids")
    if row.revoked_at is None:
        session.execute(
            update(AccessToken).where(AccessToken.id == token_id).values(revoked_at=utcnow())
        )
        session.refresh(row)
    user = session.get(User, row.user_id)
    return _token_info(row, user.name if user else "?")
