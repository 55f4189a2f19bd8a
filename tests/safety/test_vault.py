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
    VaultKeyError,
    bindings_of,
    load_key,
    open_secrets,
    set_allowed_hosts,
    set_secret,
)
from nightowl.store.database import Database
from nightowl.store.errors import Invalid, NotFound
from nightowl.store.secrets import drop_secret, secrets_of
from nightowl.store.tables import SecretRow
from nightowl.store.users import ensure_owner
from nightowl.tools.builtin import builtin_registry
from nightowl.tools.registry import ToolResult
from nightowl.tools.secret_scope import SecretScope
from nightowl.tools.send_drafts import SEND_TOOLS

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
        assert [i.name for i in secrets_of(session, owner)] == ["GITHUB_TOKEN", "MAIL"]
        stored = list(session.scalars(select(SecretRow.ciphertext)))
        assert not any(VALUE in text or "hunter2" in text for text in stored)
        assert open_secrets(session, key, owner)["GITHUB_TOKEN"] == VALUE + "2"
        with pytest.raises(VaultKeyError, match="does not open with this key"):
            open_secrets(session, Fernet.generate_key(), owner)
    with database.write() as session:
        drop_secret(session, owner, "MAIL")
        with pytest.raises(NotFound):
            drop_secret(session, owner, "MAIL")
        with pytest.raises(Invalid):
            set_secret(session, key, owner, "no spaces", "long enough")


def test_a_value_shorter_than_four_characters_is_refused_with_the_reason(
    database: Database, tmp_path: Path
) -> None:
    key = load_key(tmp_path)
    with database.write() as session:
        owner = ensure_owner(session).id
        with pytest.raises(Invalid, match=r"at least 4 characters \(this one has 3\).*told apart"):
            set_secret(session, key, owner, "PIN", "123")
        assert set_secret(session, key, owner, "PIN", "1234") is True


def test_each_secret_keeps_its_allowed_hosts_in_normal_form(
    database: Database, tmp_path: Path
) -> None:
    key = load_key(tmp_path)
    with database.write() as session:
        owner = ensure_owner(session).id
        hosts = ["API.GitHub.com.", "*.example.org", "http://127.0.0.1", "api.github.com"]
        set_secret(session, key, owner, "GH", VALUE, hosts)
        set_secret(session, key, owner, "MAIL", "hunter2-mail")
    with database.read() as session:
        assert bindings_of(session, owner) == {
            "GH": ["api.github.com", "*.example.org", "http://127.0.0.1"],
            "MAIL": [],
        }
    with database.write() as session:
        set_secret(session, key, owner, "GH", VALUE + "-rotated")  # hosts kept
        assert set_allowed_hosts(session, owner, "MAIL", ["imap.example.com"]).allowed_hosts == [
            "imap.example.com"
        ]
        for bad in ("*.com", "evil.example/path", "ftp://x.example", "two words"):
            with pytest.raises(Invalid):
                set_allowed_hosts(session, owner, "MAIL", [bad])
        with pytest.raises(NotFound):
            set_allowed_hosts(session, owner, "NOPE", [])
    with database.read() as session:
        assert bindings_of(session, owner) == {
            "GH": ["api.github.com", "*.example.org", "http://127.0.0.1"],
            "MAIL": ["imap.example.com"],
        }
        assert open_secrets(session, key, owner)["GH"] == VALUE + "-rotated"


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


def test_a_scope_substitutes_references_only_in_tools_that_take_secrets() -> None:
    scope = SecretScope({"GH": VALUE, "PIN": "12"})
    args = {"command": "curl -H 'token {{secret:GH}}' x", "list": ["{{secret:GH}}"]}
    assert scope.arguments_for("shell", True, args) == {
        "command": f"curl -H 'token {VALUE}' x",
        "list": [VALUE],
    }
    missing = scope.arguments_for("shell", True, {"command": "{{secret:NOPE}}"})
    assert isinstance(missing, ToolResult) and missing.is_error
    assert "nightowl secrets set NOPE" in missing.content
    result = scope.redact_result(ToolResult(f"echo {VALUE} 12", meta={"raw": [VALUE]}))
    assert result.content == "echo [secret:GH] 12"  # too short a value is left alone
    assert result.meta == {"raw": ["[secret:GH]"]}
    encoded = "https://x/?t=a%2Fb%3D and " + base64.b64encode(b"a/b=").decode()
    redacted = SecretScope({"S": "a/b="}).redact(encoded)
    assert redacted == "https://x/?t=[secret:S] and [secret:S]=="  # padding holds nothing


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("write_note", {"text": "pw {{secret:GH}}", "expires_in_minutes": 60}),
        ("write_skill", {"name": "gh", "description": "d", "body": "use {{secret:GH}}"}),
        ("create_routine", {"name": "r", "prompt": "{{secret:GH}}", "cron": "0 8 * * *"}),
        ("send_to_user", {"text": "your token: {{secret:GH}}"}),
        ("write_file", {"path": "a.env", "content": "TOKEN={{ secret:GH }}"}),
        ("read_file", {"path": "{{secret:GH}}"}),
        ("send_message", {"to": "dana@example.com", "text": "the key is {{secret:GH}}"}),
    ],
)
def test_tools_that_store_or_show_text_refuse_a_secret_reference(
    tool: str, arguments: dict[str, object]
) -> None:
    registry = builtin_registry()
    for send_tool in SEND_TOOLS:
        registry.add(send_tool)
    refused = SecretScope({"GH": VALUE}).parse(registry, tool, "write", arguments)
    assert isinstance(refused, ToolResult) and refused.is_error
    assert f"{tool} does not take secrets" in refused.content
    assert "(GH)" in refused.content and VALUE not in refused.content
