"""Connectors in the store: add, list, change, record what a server listed or why it failed,
and which connectors a conversation may use."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from nightowl.harness import tool_pins
from nightowl.store.connector_tables import ConnectorRow, ConversationConnectors
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.row_views import view_of
from nightowl.store.tables import Conversation, SecretRow, utcnow

NAME = re.compile(r"^[a-z][a-z0-9]{0,39}$")
EFFECTS = ("read", "write", "send", "spend")


@dataclass(frozen=True)
class ConnectorInfo:
    """A connector as the rest of the server sees it."""

    id: str
    owner_id: str
    name: str
    transport: str
    command: list[str] = field(default_factory=list)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    auth: str = "none"
    description: str = ""
    trusted: bool = False
    effects: dict[str, str] = field(default_factory=dict)
    sampling: bool = False
    tools: list[dict[str, Any]] = field(default_factory=list)
    listed_at: datetime | None = None
    status: str = "new"
    error: str = ""
    oauth: dict[str, Any] = field(default_factory=dict)
    # What the owner approved of its tools (None: nothing listed yet), and the listed tools
    # held back until they approve a change (harness/tool_pins.py).
    pinned: list[dict[str, Any]] | None = None
    held: list[str] = field(default_factory=list)
    # A stdio server's package as pinned at its first start, and a different one found at a
    # later start, which does not start until the owner approves it.
    package: dict[str, Any] | None = None
    package_held: dict[str, Any] | None = None

    def offered(self) -> list[dict[str, Any]]:
        """The listed tools the model may be offered: those exactly as approved."""
        held = set(self.held)
        return [t for t in self.tools if str(t["name"]) not in held]


def _info(row: ConnectorRow) -> ConnectorInfo:
    return view_of(
        ConnectorInfo,
        row,
        **_how_to_call(row),
        tools=list(row.tools or []),
        pinned=list(row.pinned) if row.pinned is not None else None,
        held=[str(name) for name in row.held or []],
        package=dict(row.package) if row.package is not None else None,
        package_held=dict(row.package_held) if row.package_held is not None else None,
    )


def _how_to_call(row: Any) -> dict[str, Any]:
    """The row's JSON and flag columns that a call reads, as plain Python values."""
    return {
        "command": list(row.command or []),
        "headers": {str(k): str(v) for k, v in (row.headers or {}).items()},
        "trusted": bool(row.trusted),
        "effects": {str(k): str(v) for k, v in (row.effects or {}).items()},
        "sampling": bool(row.sampling),
        "oauth": dict(row.oauth or {}),
    }


def check_name(name: str, reserved: Sequence[str] = ()) -> None:
    """Invalid unless `name` can prefix its tools' names (`<name>_<tool>`)."""
    if not NAME.match(name):
        raise Invalid(
            f"a connector's name is a word of 1-40 lowercase letters and digits starting with a "
            f"letter (its tools are called {name or 'name'}_<tool>), not {name!r}"
        )
    if name in reserved:
        raise Invalid(f"{name!r} names built-in tools ({name}_...); choose another name")


def add_connector(
    session: Session,
    owner_id: str,
    name: str,
    *,
    command: Sequence[str] = (),
    url: str | None = None,
    headers: dict[str, str] | None = None,
    auth: str = "none",
    description: str = "",
    trusted: bool = False,
) -> ConnectorInfo:
    """A new connector: a command (stdio, run inside the owner's computer) or a URL."""
    if bool(command) == bool(url):
        raise Invalid("give either a command to run (stdio) or a URL (streamable HTTP)")
    if auth not in ("none", "oauth"):
        raise Invalid(f"auth is 'none' or 'oauth', not {auth!r}")
    if command and (headers or auth != "none"):
        raise Invalid("headers and OAuth are for connectors reached by URL")
    if _row(session, owner_id, name) is not None:
        raise Invalid(f"a connector named {name!r} already exists; remove it first")
    row = ConnectorRow(
        id=new_id("con"),
        owner_id=owner_id,
        name=name,
        transport="stdio" if command else "http",
        command=list(command),
        url=url,
        headers=dict(headers or {}),
        auth=auth,
        description=description,
        trusted=trusted,
        effects={},
        sampling=False,
        tools=[],
        status="new",
        error="",
        oauth={},
    )
    session.add(row)
    session.flush()
    return _info(row)


def _row(session: Session, owner_id: str, name: str) -> ConnectorRow | None:
    return session.scalar(
        select(ConnectorRow).where(ConnectorRow.owner_id == owner_id, ConnectorRow.name == name)
    )


def _existing(session: Session, owner_id: str, name: str) -> ConnectorRow:
    row = _row(session, owner_id, name)
    if row is None:
        raise NotFound(f"no connector named {name!r}; `nightowl connectors list` shows them")
    return row


def get_connector(session: Session, owner_id: str, name: str) -> ConnectorInfo:
    """The owner's connector by name (NotFound when there is none)."""
    return _info(_existing(session, owner_id, name))


def connector_to_call(session: Session, owner_id: str, name: str) -> ConnectorInfo | None:
    """The owner's connector as a call needs it now (None when it was removed): how to reach
    it and what the owner decided, without the tools it listed (left empty: a call never
    reads them, and parsing a listing costs more than the rest of the row). Every connector
    call runs it, so it is one prebuilt statement."""
    row = session.connection().execute(_TO_CALL, {"owner_id": owner_id, "name": name}).first()
    if row is None:
        return None
    return ConnectorInfo(**{**row._asdict(), **_how_to_call(row)}, owner_id=owner_id, name=name)


_TO_CALL = select(
    ConnectorRow.id,
    ConnectorRow.transport,
    ConnectorRow.command,
    ConnectorRow.url,
    ConnectorRow.headers,
    ConnectorRow.auth,
    ConnectorRow.description,
    ConnectorRow.trusted,
    ConnectorRow.effects,
    ConnectorRow.sampling,
    ConnectorRow.listed_at,
    ConnectorRow.status,
    ConnectorRow.error,
    ConnectorRow.oauth,
).where(ConnectorRow.owner_id == bindparam("owner_id"), ConnectorRow.name == bindparam("name"))


def connectors_of(session: Session, owner_id: str) -> list[ConnectorInfo]:
    """Every connector of the owner, by name."""
    rows = session.scalars(
        select(ConnectorRow).where(ConnectorRow.owner_id == owner_id).order_by(ConnectorRow.name)
    )
    return [_info(row) for row in rows]


def change_connector(
    session: Session,
    owner_id: str,
    name: str,
    *,
    description: str | None = None,
    trusted: bool | None = None,
    sampling: bool | None = None,
    effects: dict[str, str] | None = None,
) -> ConnectorInfo:
    """Change what the owner decides about a connector (None leaves a field as it is);
    `effects` replaces the per-tool overrides (an empty effect removes one)."""
    row = _existing(session, owner_id, name)
    if description is not None:
        row.description = description
    if trusted is not None:
        row.trusted = trusted
    if sampling is not None:
        row.sampling = sampling
    if effects is not None:
        bad = sorted({e for e in effects.values() if e and e not in EFFECTS})
        if bad:
            raise Invalid(f"an effect is one of {', '.join(EFFECTS)}, not {bad[0]!r}")
        merged = {**(row.effects or {}), **effects}
        row.effects = {tool: effect for tool, effect in merged.items() if effect}
    row.updated_at = utcnow()
    session.flush()
    return _info(row)


def record_listing(
    session: Session, owner_id: str, name: str, tools: list[dict[str, Any]]
) -> ConnectorInfo:
    """The tools the server listed just now; the connector works. The first listing pins
    them (the owner approved what they added); a later one holds back each tool that differs
    from its pin or is new, until the owner approves it (`approve_tools`)."""
    row = _existing(session, owner_id, name)
    row.tools, row.listed_at, row.status, row.error = tools, utcnow(), "ok", ""
    if row.pinned is None:
        row.pinned = tool_pins.approve(tools, None)
    row.held = [change.name for change in tool_pins.unapproved(tools, row.pinned)]
    session.flush()
    return _info(row)


def record_package(
    session: Session, owner_id: str, name: str, probed: dict[str, Any]
) -> ConnectorInfo:
    """What a stdio server's command runs, found just before it starts: the first one is
    pinned; one that differs from the pin is held (the server must not start) until the owner
    approves it; one that matches clears what was held."""
    row = _existing(session, owner_id, name)
    if row.package is None:
        row.package, row.package_held = probed, None
    elif tool_pins.package_change(row.package, probed) is None:
        row.package_held = None
    else:
        row.package_held = probed
    session.flush()
    return _info(row)


def approve_tools(
    session: Session, owner_id: str, name: str, tools: Sequence[str] | None = None
) -> ConnectorInfo:
    """The owner approves the held tools as listed now (`tools`: only these, by their name
    on the server; None: all, and a held package); Invalid when one named is not held."""
    row = _existing(session, owner_id, name)
    held = [str(n) for n in row.held or []]
    if tools is not None:
        unknown = sorted(set(tools) - set(held))
        if unknown:
            waiting = [*held, *(["its package"] if row.package_held is not None else [])]
            raise Invalid(
                f"{', '.join(unknown)}: not waiting for approval on {name} "
                f"(waiting: {', '.join(waiting) or 'none'}; a package is approved with the "
                "rest, naming no tool)"
            )
    elif row.package_held is not None:
        row.package, row.package_held = row.package_held, None
    row.pinned = tool_pins.approve(list(row.tools or []), row.pinned, tools)
    row.held = [change.name for change in tool_pins.unapproved(list(row.tools or []), row.pinned)]
    row.updated_at = utcnow()
    session.flush()
    return _info(row)


def record_failure(session: Session, owner_id: str, name: str, status: str, error: str) -> None:
    """Why the connector could not be reached (`status`: failed | authorize)."""
    row = _row(session, owner_id, name)
    if row is not None:
        row.status, row.error = status, error[:2000]


def set_oauth_state(session: Session, owner_id: str, name: str, state: dict[str, Any]) -> None:
    """Replace the connector's non-secret OAuth state (client id, expiry, scope)."""
    row = _existing(session, owner_id, name)
    row.oauth = dict(state)


def drop_connector(session: Session, owner_id: str, name: str) -> None:
    """Delete a connector (NotFound when there is none by that name) and what its OAuth
    authorisation left in the owner's vault (tools/mcp/oauth.py: its tokens and registered
    client): a connector added again by that name authorises afresh."""
    row = _existing(session, owner_id, name)
    session.delete(row)
    session.execute(
        delete(SecretRow).where(
            SecretRow.owner_id == owner_id,
            SecretRow.name.in_([f"connector.{name}.{part}" for part in OAUTH_SECRETS]),
        )
    )


# The vault entries an OAuth connector's authorisation keeps, `connector.<name>.<part>`.
OAUTH_SECRETS = ("access", "refresh", "client")


def allowed_connectors(session: Session, conversation_id: str) -> list[str] | None:
    """The connectors the conversation may use by name; None: all of its owner's."""
    row = session.get(ConversationConnectors, conversation_id)
    return None if row is None else list(row.names)


def set_allowed_connectors(
    session: Session, conversation_id: str, names: Sequence[str] | None
) -> None:
    """Limit the conversation to these connectors (None: every connector of its owner)."""
    session.execute(
        delete(ConversationConnectors).where(
            ConversationConnectors.conversation_id == conversation_id
        )
    )
    if names is not None:
        session.add(ConversationConnectors(conversation_id=conversation_id, names=sorted(names)))
    session.flush()


def conversation_connector(
    session: Session, conversation_id: str, name: str
) -> ConnectorInfo | None:
    """One connector the conversation may use, by name (None: there is none, or the
    conversation may not use it): a lookup that reads one row, not all of them."""
    owner_id = session.scalar(
        select(Conversation.owner_id).where(Conversation.id == conversation_id)
    )
    row = _row(session, owner_id, name) if owner_id is not None else None
    if row is None:
        return None
    allowed = allowed_connectors(session, conversation_id)
    return _info(row) if allowed is None or name in allowed else None


def conversation_connectors(
    session: Session, conversation_id: str
) -> tuple[str, list[ConnectorInfo]]:
    """The conversation's owner and the connectors it may use."""
    owner_id = session.scalar(
        select(Conversation.owner_id).where(Conversation.id == conversation_id)
    )
    if owner_id is None:
        return "", []
    found = connectors_of(session, owner_id)
    allowed = allowed_connectors(session, conversation_id)
    if allowed is not None:
        found = [c for c in found if c.name in allowed]
    return owner_id, found
