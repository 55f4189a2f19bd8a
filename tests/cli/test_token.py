"""`nightowl token`: create, list and revoke access tokens on the store directly."""

from __future__ import annotations

from pathlib import Path

from tests.cli.commands import data_env, run_nightowl


def test_token_create_list_revoke(tmp_path: Path) -> None:
    env = data_env(tmp_path)
    created = run_nightowl("token", "create", "--name", "phone", env=env)
    assert created.returncode == 0, created.stderr
    token_id, secret = created.stdout.split()[2], created.stdout.split(": ", 1)[1].split()[0]
    assert secret.startswith("nwl_")
    listed = run_nightowl("token", "list", env=env)
    assert token_id in listed.stdout and "phone" in listed.stdout and "active" in listed.stdout
    assert secret not in listed.stdout  # secrets are never printed again
    revoked = run_nightowl("token", "revoke", token_id, env=env)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert "revoked" in run_nightowl("token", "list", env=env).stdout
    unknown = run_nightowl("token", "revoke", "tok_missing", env=env)
    assert unknown.returncode == 2 and "token list" in unknown.stderr
    no_user = run_nightowl("token", "create", "--user", "nobody", env=env)
    assert no_user.returncode == 2 and "no user named" in no_user.stderr
