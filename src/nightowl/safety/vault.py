"""The secrets vault: values encrypted at rest (Fernet), used by tools by reference only.

Tools that need a secret name it as `{{secret:NAME}}`; the runtime substitutes its value when
the tool runs and redacts every value (in the forms tools echo it, safety/redaction.py) from
what the tool returns, so no value reaches a model request, a message, workflow history or a
log. Any other tool refuses a reference. Each secret carries the hosts it may be sent to
(safety/destinations.py). The table itself is store/secrets.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy.orm import Session

from nightowl.safety import destinations
from nightowl.safety.redaction import MIN_SECRET_CHARS
from nightowl.store.errors import Invalid
from nightowl.store.secrets import SecretInfo, put_sealed, sealed_of, secrets_of, set_hosts

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
KEY_FILE = "secret.key"


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


def set_secret(
    session: Session,
    key: bytes,
    owner_id: str,
    name: str,
    value: str,
    allowed_hosts: Sequence[str] | None = None,
) -> bool:
    """Store or replace a secret; True when it was new. `allowed_hosts` None keeps a replaced
    secret's hosts."""
    check_name(name)
    if len(value) < MIN_SECRET_CHARS:
        raise Invalid(
            f"a secret's value needs at least {MIN_SECRET_CHARS} characters (this one has "
            f"{len(value)}): a shorter one could not be told apart from ordinary text, so it "
            "could not be kept out of outputs and logs"
        )
    hosts = None if allowed_hosts is None else checked_hosts(allowed_hosts)
    ciphertext = Fernet(key).encrypt(value.encode()).decode()
    return put_sealed(session, owner_id, name, ciphertext, hosts)


def check_name(name: str) -> None:
    """Invalid unless the name is one a reference can carry."""
    if not NAME.match(name):
        raise Invalid("a secret's name is 1-100 letters, digits, '_', '.' or '-'")


def checked_hosts(entries: Sequence[str]) -> list[str]:
    """Allowed-host entries in normal form (Invalid with what to write instead)."""
    try:
        return destinations.allowed_hosts(entries)
    except destinations.BadHost as error:
        raise Invalid(str(error)) from None


def set_allowed_hosts(
    session: Session, owner_id: str, name: str, entries: Sequence[str]
) -> SecretInfo:
    """Replace where a secret may go without the owner's approval."""
    return set_hosts(session, owner_id, name, checked_hosts(entries))


def bindings_of(session: Session, owner_id: str) -> dict[str, list[str]]:
    """Each secret's allowed hosts, by name (what the gate checks destinations against)."""
    return {info.name: info.allowed_hosts for info in secrets_of(session, owner_id)}


def open_secrets(session: Session, key: bytes, owner_id: str) -> dict[str, str]:
    """Every secret of the owner, decrypted (for substitution and redaction only)."""
    return open_sealed(key, sealed_of(session, owner_id))


def open_sealed(key: bytes, sealed: list[tuple[str, str]]) -> dict[str, str]:
    """Secrets read sealed (`sealed_of`), decrypted: read in a transaction, opened after it."""
    fernet = Fernet(key)
    opened = {}
    for name, ciphertext in sealed:
        try:
            opened[name] = fernet.decrypt(ciphertext.encode()).decode()
        except InvalidToken as error:
            raise VaultKeyError(
                f"secret {name!r} does not open with this key (was the key changed?)"
            ) from error
    return opened
