"""The secrets vault: values encrypted at rest (Fernet), used by tools by reference only.

Tools name a secret as `{{secret:NAME}}`; the runtime substitutes its value when the tool runs
and redacts every value from what the tool returns, so no value reaches a model request, a
message, workflow history or a log.
"""

from __future__ import annotations

import base64
import os
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cryptography.fernet import Fernet, InvalidToken
from pydantic import BaseModel
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from nightowl.safety.policy import OWNER_FACING, SECRET_REF
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.ids import new_id
from nightowl.store.tables import SecretRow, utcnow
from nightowl.tools.registry import ToolRegistry, ToolResult

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
KEY_FILE = "secret.key"
MIN_REDACTED = 4  # shorter values would redact ordinary words


class VaultKeyError(Exception):
    """The vault key is missing, malformed or does not open a stored secret."""


def load_key(data_dir: Path, given: str | None = None) -> bytes:
    """The vault key: `given` (NIGHTOWL_SECRET_KEY), else a key file in the data dir (created
    readable by this user only)."""
    if given:
        key = given.encode()
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / KEY_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if path.stat().st_mode & 0o077:
                raise VaultKeyError(
                    f"{path} is readable by other users; run `chmod 600 {path}`"
                ) from None
            key = path.read_bytes().strip()
        else:
            key = Fernet.generate_key()
            with os.fdopen(fd, "wb") as file:
                file.write(key + b"\n")
    try:
        Fernet(key)
    except ValueError as error:
        raise VaultKeyError(
            "the secret key must be 32 url-safe base64-encoded bytes (Fernet)"
        ) from error
    return key


def set_secret(session: Session, key: bytes, owner_id: str, name: str, value: str) -> bool:
    """Store or replace a secret; True when it was new."""
    if not NAME.match(name):
        raise Invalid("a secret's name is 1-100 letters, digits, '_', '.' or '-'")
    if not value:
        raise Invalid("a secret's value is empty")
    ciphertext = Fernet(key).encrypt(value.encode()).decode()
    row = session.scalar(
        select(SecretRow).where(SecretRow.owner_id == owner_id, SecretRow.name == name)
    )
    if row is None:
        session.add(
            SecretRow(id=new_id("sec"), owner_id=owner_id, name=name, ciphertext=ciphertext)
        )
        return True
    row.ciphertext, row.updated_at = ciphertext, utcnow()
    return False


def secret_names_of(session: Session, owner_id: str) -> list[tuple[str, Any]]:
    """(name, updated_at) of every secret of the owner, sorted by name; never the values."""
    rows = session.execute(
        select(SecretRow.name, SecretRow.updated_at)
        .where(SecretRow.owner_id == owner_id)
        .order_by(SecretRow.name)
    ).all()
    return [(row[0], row[1]) for row in rows]


def delete_secret(session: Session, owner_id: str, name: str) -> None:
    """Delete a secret (NotFound when there is none by that name)."""
    gone = session.execute(
        delete(SecretRow).where(SecretRow.owner_id == owner_id, SecretRow.name == name)
    )
    if not gone.rowcount:  # type: ignore[attr-defined]
        raise NotFound(f"no secret named {name!r}")


def open_secrets(session: Session, key: bytes, owner_id: str) -> dict[str, str]:
    """Every secret of the owner, decrypted (for substitution and redaction only)."""
    fernet = Fernet(key)
    opened = {}
    for row in session.scalars(select(SecretRow).where(SecretRow.owner_id == owner_id)):
        try:
            opened[row.name] = fernet.decrypt(row.ciphertext.encode()).decode()
        except InvalidToken as error:
            raise VaultKeyError(
                f"secret {row.name!r} does not open with this key (was the key changed?)"
            ) from error
    return opened


def encodings(value: str) -> list[str]:
    """The forms a secret's value commonly takes in output: as is, URL-encoded, base64."""
    encoded = base64.b64encode(value.encode()).decode()
    return list(dict.fromkeys([value, quote(value, safe=""), encoded, encoded.rstrip("=")]))


@dataclass(frozen=True)
class SecretScope:
    """An owner's secrets while one tool runs: substitute on the way in, redact on the way out."""

    values: Mapping[str, str] = field(default_factory=dict)

    def missing(self, arguments: Any) -> list[str]:
        """Names referenced in the arguments that the vault does not hold."""
        text = repr(arguments)
        return sorted({n for n in SECRET_REF.findall(text) if n not in self.values})

    def substitute(self, value: Any) -> Any:
        """The arguments with every `{{secret:NAME}}` replaced by its value."""
        if isinstance(value, str):
            return SECRET_REF.sub(lambda m: self.values.get(m.group(1), m.group(0)), value)
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        return value

    @cached_property
    def forms(self) -> list[tuple[str, str]]:
        """(form, secret name) of every value long enough to redact, longest values first,
        each value as is, URL-encoded and base64."""
        ordered = sorted(self.values.items(), key=lambda item: -len(item[1]))
        return [
            (form, name)
            for name, value in ordered
            if len(value) >= MIN_REDACTED
            for form in encodings(value)
        ]

    def redact(self, text: str) -> str:
        """The text with every secret value (as is, URL-encoded or base64) replaced by its
        reference, longest values first."""
        for form, name in self.forms:
            if form in text:
                text = text.replace(form, f"[secret:{name}]")
        return text

    def redact_data(self, value: Any) -> Any:
        """`redact` applied to every string inside a JSON-like value."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self.redact_data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_data(v) for v in value]
        return value

    def arguments_for(self, tool: str, effect: str, arguments: dict[str, Any]) -> Any:
        """What the tool runs with: secrets substituted, except in what reaches people (the
        owner's messages, sends, payments), where a reference stays a reference. An unknown
        name is an error result the agent can act on."""
        if tool in OWNER_FACING or effect in ("send", "spend"):
            return arguments
        missing = self.missing(arguments)
        if missing:
            names = ", ".join(missing)
            return ToolResult(
                f"No secret named {names} in the vault. Ask the owner to add it "
                f"(`nightowl secrets set {missing[0]}`), then try again.",
                is_error=True,
            )
        return self.substitute(arguments)

    def parse(
        self, tools: ToolRegistry, tool: str, effect: str, arguments: dict[str, Any]
    ) -> BaseModel | ToolResult:
        """The tool's validated arguments with secrets substituted, or an error result."""
        given = self.arguments_for(tool, effect, arguments)
        return given if isinstance(given, ToolResult) else tools.parse_arguments(tool, given)

    def redact_result(self, result: ToolResult) -> ToolResult:
        """The tool's result with every secret value replaced by its reference."""
        if not self.values:
            return result
        return ToolResult(
            self.redact(result.content),
            is_error=result.is_error,
            ends_turn=result.ends_turn,
            meta=self.redact_data(result.meta),
        )

    def trace(self) -> str:
        """The current exception's traceback, redacted (for the log)."""
        return self.redact(traceback.format_exc())[-4000:]
