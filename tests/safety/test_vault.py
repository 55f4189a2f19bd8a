"""The secrets vault on SQLite and PostgreSQL: encrypted at rest, used by reference only."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from nightowl.safety.vault import (
    SecretScope,
    VaultKeyError,
    delete_secret,
    load_key,
    open_secrets,
    secret_names_of,
    set_secret,
)
from nightowl.store.database import Database
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.tables import SecretRow
from nightowl.store.users import ensure_owner
from nightowl.tools.registry import ToolResult

VALUE = "ghp_canary_5f0c2d9e8b7a"


def test_secrets_are_stored_encrypted_listed_by_name_and_deleted(
    database: Database, tmp_path: Path
) -> None:
    key = load_key(tmp_path)
    with database.write() as session:
        owner = ensure_owner(session).id
        assert set_secret(session, key, owner, "GITHUB_TOKEN", VALUE) is True
        assert set_secret(session, key, owner, "GITHUB_TOKEN", VALUE + "2") is False
        set_secret(session, key, owner, "MAIL", "hunter2-mail")
    with database.read() as session:
        assert [n for n, _ in secret_names_of(session, owner)] == ["GITHUB_TOKEN", "MAIL"]
        stored = list(session.scalars(select(SecretRow.ciphertext)))
        assert not any(VALUE in text or "hunter2" in text for text in stored)
        assert open_secrets(session, key, owner)["GITHUB_TOKEN"] == VALUE + "2"
        with pytest.raises(VaultKeyError, match="does not open with this key"):
            open_secrets(session, Fernet.generate_key(), owner)
    with database.write() as session:
        delete_secret(session, owner, "MAIL")
        with pytest.raises(NotFound):
            delete_secret(session, owner, "MAIL")
        with pytest.raises(Invalid):
            set_secret(session, key, owner, "no spaces", "x")


def test_the_key_file_is_created_readable_only_by_its_user_and_reused(tmp_path: Path) -> None:
    key = load_key(tmp_path)
    path = tmp_path / "secret.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key(tmp_path) == key
    os.chmod(path, 0o644)
    with pytest.raises(VaultKeyError, match="chmod 600"):
        load_key(tmp_path)
    given = Fernet.generate_key().decode()
    assert load_key(tmp_path / "other", given) == given.encode()
    with pytest.raises(VaultKeyError, match="32 url-safe"):
        load_key(tmp_path, "not-a-key")


def test_a_scope_substitutes_references_and_redacts_values() -> None:
    scope = SecretScope({"GH": VALUE, "PIN": "12"})
    args = {"command": "curl -H 'token {{secret:GH}}' x", "list": ["{{secret:GH}}"]}
    assert scope.arguments_for("shell", "write", args) == {
        "command": f"curl -H 'token {VALUE}' x",
        "list": [VALUE],
    }
    # In what reaches people, a reference stays a reference.
    assert scope.arguments_for("send_to_user", "write", args) == args
    assert scope.arguments_for("send_message", "send", args) == args
    missing = scope.arguments_for("shell", "write", {"command": "{{secret:NOPE}}"})
    assert isinstance(missing, ToolResult) and missing.is_error
    assert "nightowl secrets set NOPE" in missing.content
    result = scope.redact_result(ToolResult(f"echo {VALUE} 12", meta={"raw": [VALUE]}))
    assert result.content == "echo [secret:GH] 12"  # too short a value is left alone
    assert result.meta == {"raw": ["[secret:GH]"]}
    encoded = "https://x/?t=a%2Fb%3D and " + base64.b64encode(b"a/b=").decode()
    assert SecretScope({"S": "a/b="}).redact(encoded) == "https://x/?t=[secret:S] and [secret:S]"
