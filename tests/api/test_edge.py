"""The edges of the API against a real server, on SQLite and PostgreSQL: bodies are bounded and
strangers refused before a byte is read, rate limits per token and per address, the docs
behind a token, webhook signatures that cannot be replayed or crash the server, streams that
end when their token is revoked, the owner token printed once."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from nightowl.channels.webhooks import sign
from tests.server import NIGHTOWL, TLS, ServerProcess, wait_for

pytestmark = pytest.mark.slow

BODY_LIMIT = 1024 * 1024  # NIGHTOWL_MAX_BODY_BYTES's default

# `server` (tests/api/conftest.py): one server per database for the module.


def _first_answer(server: ServerProcess, head: str) -> bytes:
    """Send only a request's head (its body never comes) and return what the server answers:
    a server that waited for the body would answer nothing."""
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        try:
            while not _complete(answer):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except TimeoutError:
            pass
    return answer


def _complete(answer: bytes) -> bool:
    head, separator, body = answer.partition(b"\r\n\r\n")
    if not separator:
        return False
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def _status_and_error(answer: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"]


def test_bodies_are_bounded_and_strangers_refused_before_reading(server: ServerProcess) -> None:
    with server.client() as client:
        conversation = client.post("/v1/conversations", json={}).json()["id"]
        hook = client.post("/v1/hooks", json={"name": "edge"}).json()
    path = f"/v1/conversations/{conversation}/messages"

    # A stranger's request is refused from its head alone.
    stranger = _first_answer(server, f"POST {path} HTTP/1.1\nHost: x\nContent-Length: 5000\n")
    assert _status_and_error(stranger) == (401, _status_and_error(stranger)[1])
    assert _status_and_error(stranger)[1]["code"] == "missing_token"
    forged = _first_answer(
        server,
        f"POST {path} HTTP/1.1\nHost: x\nAuthorization: Bearer nwl_forged\nContent-Length: 5\n",
    )
    assert _status_and_error(forged)[1]["code"] == "invalid_token"

    # A declared body over the limit is refused from its head alone, saying the limit.
    too_big = _first_answer(
        server,
        f"POST {path} HTTP/1.1\nHost: x\nAuthorization: Bearer {server.token}\n"
        f"Content-Type: application/json\nContent-Length: {BODY_LIMIT + 1}\n",
    )
    status, error = _status_and_error(too_big)
    assert status == 413 and str(BODY_LIMIT) in error["message"]
    # So is a webhook delivery over 256 KiB, and one whose signature headers are missing.
    delivery = f"POST {hook['url_path']} HTTP/1.1\nHost: x\nContent-Length: {300 * 1024}\n"
    assert _status_and_error(_first_answer(server, delivery))[0] == 413
    unsigned = f"POST {hook['url_path']} HTTP/1.1\nHost: x\nContent-Length: 100\n"
    assert _status_and_error(_first_answer(server, unsigned))[0] == 401
    # A channel's ingress needs no token (the channel checks the request), takes up to 1 MiB
    # and says which URL was wrong; a channel that takes no pushed events is not found there.
    ingress = f"POST /v1/ingress/chn_none HTTP/1.1\nHost: x\nContent-Length: {2 << 20}\n"
    assert _status_and_error(_first_answer(server, ingress))[0] == 413
    with httpx.Client(base_url=server.url, verify=TLS) as stranger_client:
        missing = stranger_client.post("/v1/ingress/chn_none", content=b"{}")
        assert missing.status_code == 404, missing.text
        assert "check the URL" in missing.json()["error"]["message"]

    # A body that streams past the limit (no length declared) is cut off: 413, nothing stored.
    def chunks() -> Iterator[bytes]:
        yield b'{"client_id": "big", "text": "'
        for _ in range(BODY_LIMIT // 1024 + 2):
            yield b"x" * 1024
        yield b'"}'

    with server.client() as client:
        streamed = client.post(path, content=chunks(), headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413, streamed.text
        assert str(BODY_LIMIT) in streamed.json()["error"]["message"]
        fact = client.post("/v1/memory/facts", content=b'{"text": "' + b"y" * BODY_LIMIT + b'"}')
        assert fact.status_code == 413
        assert client.get(path).json()["messages"] == []
        assert client.get("/v1/memory/facts").json() == []


def test_rate_limits_per_token_and_per_address(tmp_path: Path, database_url: str) -> None:
    env = {"NIGHTOWL_RATE_LIMIT_PER_TOKEN": "5", "NIGHTOWL_RATE_LIMIT_PER_ADDRESS": "13"}
    server = ServerProcess(tmp_path / "data", database_url, env=env).start()
    try:
        member = server.member_token(f"m-{time.monotonic_ns()}")
        with server.client() as owner, server.client(token=member) as other:
            assert [owner.get("/v1/me").status_code for _ in range(5)] == [200] * 5
            limited = owner.get("/v1/me")
            assert limited.status_code == 429
            assert limited.json()["error"]["code"] == "rate_limited"
            assert int(limited.headers["Retry-After"]) >= 1
            # Another token is not held back by the first one's limit...
            assert [other.get("/v1/me").status_code for _ in range(5)] == [200] * 5
            # ... but the address is: 13 requests a minute from it, signed in or not.
            assert httpx.get(f"{server.url}/v1/me").status_code == 401
            assert other.get("/v1/me").status_code == 429  # the token's 6th
            assert httpx.get(f"{server.url}/v1/me").status_code == 429  # the address's 14th
            assert httpx.get(f"{server.url}/healthz").status_code == 200  # monitoring passes
    finally:
        server.stop()


def test_api_docs_are_off_unless_asked_for_and_then_need_a_token(
    server: ServerProcess, tmp_path: Path
) -> None:
    for page in ("/docs", "/redoc"):
        assert httpx.get(f"{server.url}{page}").status_code == 401
        with server.client() as client:
            assert client.get(page).status_code == 404  # off
    with_docs = ServerProcess(tmp_path / "data", env={"NIGHTOWL_API_DOCS": "true"}).start()
    try:
        assert httpx.get(f"{with_docs.url}/docs").status_code == 401
        assert httpx.get(f"{with_docs.url}/redoc").status_code == 401
        page = httpx.get(f"{with_docs.url}/docs", params={"access_token": with_docs.token})
        assert page.status_code == 200 and "swagger" in page.text.lower()
    finally:
        with_docs.stop()


def _signed(
    hook: dict[str, str], body: bytes, delivery: str, stamp: str | None = None
) -> dict[str, str]:
    stamp = stamp or str(int(time.time()))
    return {
        "Content-Type": "application/json",
        "X-Nightowl-Timestamp": stamp,
        "X-Nightowl-Signature": sign(hook["secret"], stamp, body),
        "X-Nightowl-Delivery": delivery,
    }


def test_webhook_signatures_cannot_be_replayed_or_crash_the_server(
    server: ServerProcess,
) -> None:
    with server.client() as client:
        hook = client.post("/v1/hooks", json={"name": "replays"}).json()
    url = f"{server.url}{hook['url_path']}"
    body = b'{"event": "invoice.paid"}'
    headers = _signed(hook, body, "evt-1")
    assert httpx.post(url, content=body, headers=headers).json()["duplicate"] is False
    # The same signed request again (a sender's retry) is the same delivery: a duplicate.
    retried = httpx.post(url, content=body, headers=headers)
    assert retried.status_code == 202 and retried.json()["duplicate"] is True
    # The same signed body under another delivery id is a replay: refused.
    replayed = httpx.post(url, content=body, headers={**headers, "X-Nightowl-Delivery": "evt-2"})
    assert replayed.status_code == 409 and replayed.json()["error"]["code"] == "replayed"
    # A signature header of any bytes is a 401, never a 500.
    for garbage in ("sha256=\xe9\xff", "\x80\xfe" * 40, "sha256=" + "é" * 64, "x" * 5000):
        wrong = {**_signed(hook, body, "evt-3"), "X-Nightowl-Signature": garbage}
        answer = httpx.post(
            url, content=body, headers={k: v.encode("latin-1") for k, v in wrong.items()}
        )
        assert answer.status_code == 401, (garbage, answer.text)
    arabic_digits = "\u0661\u0667" + "\u0660" * 8
    for stamp in (arabic_digits, "+1700000000", "9" * 5000):
        odd = _signed(hook, body, "evt-4", stamp=stamp)
        answer = httpx.post(url, content=body, headers={k: v.encode() for k, v in odd.items()})
        assert answer.status_code == 401, (stamp, answer.text)
    with server.client() as client:
        page = client.get(f"/v1/conversations/{hook['conversation_id']}/messages").json()
    assert len(page["messages"]) == 1


def _revoke(server: ServerProcess, token: str) -> None:
    listed = subprocess.run(
        [NIGHTOWL, "token", "list"], env=server.env, capture_output=True, text=True, check=True
    ).stdout
    with server.client(token=token) as client:
        name = client.get("/v1/me").json()["name"]
    token_id = next(line.split()[0] for line in listed.splitlines() if f" {name} " in line)
    subprocess.run([NIGHTOWL, "token", "revoke", token_id], env=server.env, check=True)


def test_the_change_feed_ends_soon_after_its_token_is_revoked(server: ServerProcess) -> None:
    member = server.member_token(f"leaving-{time.monotonic_ns()}")
    lines: list[str] = []
    connected, ended = threading.Event(), threading.Event()

    def listen() -> None:
        with (
            server.client(token=member) as client,
            client.stream("GET", "/v1/events", timeout=60) as stream,
        ):
            for line in stream.iter_lines():
                lines.append(line)
                connected.set()
        ended.set()

    threading.Thread(target=listen, daemon=True).start()
    assert connected.wait(10)
    _revoke(server, member)
    # Checked every 2 seconds; the keepalive alone would hold it open for good.
    assert ended.wait(20), lines
    assert "event: revoked" in lines
    assert httpx.get(f"{server.url}/v1/events", params={"access_token": member}).status_code == 401


def test_the_owner_token_is_printed_on_first_start_only(server: ServerProcess) -> None:
    first_start = server.log_path.read_text()
    assert server.token in first_start
    server.stop()
    mark = len(server.log_path.read_text())
    server.start()
    assert server.token not in server.log_path.read_text()[mark:]
    assert "`nightowl token`" in server.log_path.read_text()[mark:]
    shown = subprocess.run(
        [NIGHTOWL, "token"], env=server.env, capture_output=True, text=True, check=True
    ).stdout
    assert server.token in shown and f"/#token={server.token}" in shown


def test_a_members_routine_fires_with_the_members_trust(server: ServerProcess) -> None:
    member = server.member_token(f"routine-{time.monotonic_ns()}")
    with server.client(token=member) as client:
        made = client.post(
            "/v1/routines", json={"name": "tick", "prompt": "check", "cron": "* * * * * *"}
        )
        assert made.status_code == 201, made.text
        routine = made.json()
        assert (routine["created_by"], routine["status"]) == ("member", "active")
        path = f"/v1/conversations/{routine['conversation_id']}/messages"
        fired = wait_for(lambda: client.get(path).json()["messages"], timeout=30)
        client.post(f"/v1/routines/{routine['id']}/pause")
    assert {m["trust"] for m in fired} == {"member"}
