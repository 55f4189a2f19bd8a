"""Real servers for the channel tests, started on 127.0.0.1 from the cached venvs that
scripts/install-channel-servers.sh makes: a mail system (pymap IMAP + aiosmtpd SMTP, see
mailserver.py) and a Matrix homeserver (Synapse on SQLite, no federation)."""

from __future__ import annotations

import base64
import email
import email.policy
import email.utils
import hashlib
import hmac
import imaplib
import json
import os
import signal
import smtplib
import subprocess
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx

from tests.server import TLS, free_port

CACHE = Path(
    os.environ.get("NIGHTOWL_CHANNEL_SERVERS")
    or Path.home() / ".cache" / "nightowl" / "channel-servers"
)
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def ensure_installed() -> None:
    """Install the servers' venvs (once; the script keeps a stamp)."""
    subprocess.run([str(SCRIPTS / "install-channel-servers.sh")], check=True)


def _wait_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-3000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"server did not listen on {port}: {log.read_text()[-3000:]}")


class MailServer:
    """IMAP and SMTP on 127.0.0.1, users with maildirs under `folder` (kept across restarts)."""

    DOMAIN = "example.test"

    def __init__(self, folder: Path, users: dict[str, str]) -> None:
        self.folder = folder
        self.users = users
        self.imap_port = free_port()
        self.smtp_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = folder / "mailserver.log"

    def start(self) -> MailServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    str(CACHE / "mail" / "bin" / "python"),
                    str(Path(__file__).with_name("mailserver.py")),
                    str(self.folder / "mail"),
                    str(self.imap_port),
                    str(self.smtp_port),
                    *(f"{u}:{p}" for u, p in self.users.items()),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_port(self.imap_port, self.process, self.log, 30)
        _wait_port(self.smtp_port, self.process, self.log, 30)
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def hold(self, held: bool) -> None:
        """Hold back (or release) the SMTP server's answer to each mail, after delivering it."""
        flag = self.folder / "mail" / "hold"
        if held:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def address(self, user: str) -> str:
        return f"{user}@{self.DOMAIN}"

    def send(self, mail: EmailMessage | bytes) -> None:
        """Hand a mail to the SMTP server (as another mail host would); raw bytes as they are
        (a DKIM-signed mail)."""
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=10) as smtp:
            if isinstance(mail, bytes):
                parsed = email.message_from_bytes(mail, policy=email.policy.default)
                sender = email.utils.parseaddr(str(parsed["From"]))[1]
                recipients = [a for _, a in email.utils.getaddresses([str(parsed["To"])])]
                smtp.sendmail(sender, recipients, mail)
            else:
                smtp.send_message(mail)

    def mailbox(self, user: str) -> list[EmailMessage]:
        """Every mail in the user's INBOX, oldest first."""
        imap = imaplib.IMAP4("127.0.0.1", self.imap_port, timeout=10)
        try:
            imap.login(user, self.users[user])
            imap.select("INBOX")
            _, data = imap.uid("SEARCH", None, "ALL")
            found = []
            for uid in (data[0] or b"").split():
                _, fetched = imap.uid("FETCH", uid.decode(), "(BODY.PEEK[])")
                raw = next(part[1] for part in fetched if isinstance(part, tuple))
                found.append(email.message_from_bytes(raw, policy=email.policy.default))
            return found  # type: ignore[return-value]
        finally:
            imap.logout()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None


def mail(
    sender: str, to: str, subject: str, text: str, message_id: str, **headers: str
) -> EmailMessage:
    """A plain-text mail."""
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = sender, to, subject
    message["Message-ID"] = message_id
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(text)
    return message


class DkimKey:
    """A domain's DKIM signing key (RSA 2048) and its public record, to pin in settings."""

    def __init__(self, domain: str = "example.test", selector: str = "test") -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.domain, self.selector = domain, selector
        self.private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        record = "v=DKIM1; k=rsa; p=" + base64.b64encode(public).decode()
        self.pinned = {f"{selector}._domainkey.{domain}": record}

    def sign(self, message: EmailMessage) -> bytes:
        """The mail as sent, with its DKIM-Signature header."""
        import dkim

        raw = message.as_bytes(policy=email.policy.SMTP)
        header = dkim.sign(
            raw,
            self.selector.encode(),
            self.domain.encode(),
            self.private,
            include_headers=[b"from", b"to", b"subject", b"message-id"],
        )
        return bytes(header) + raw


class Synapse:
    """A Matrix homeserver (server name `localhost`) on 127.0.0.1, SQLite, no federation,
    no rate limits; users are made with the shared-secret admin API."""

    SERVER = "localhost"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.secret = hashlib.sha256(os.urandom(16)).hexdigest()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = folder / "synapse.log"
        self.config = folder / "homeserver.yaml"

    def _write_config(self) -> None:
        unlimited = {"per_second": 10000, "burst_count": 10000}
        config: dict[str, Any] = {
            "server_name": self.SERVER,
            "pid_file": str(self.folder / "homeserver.pid"),
            "listeners": [
                {
                    "port": self.port,
                    "bind_addresses": ["127.0.0.1"],
                    "type": "http",
                    "tls": False,
                    "x_forwarded": False,
                    "resources": [{"names": ["client"], "compress": False}],
                }
            ],
            "database": {"name": "sqlite3", "args": {"database": str(self.folder / "hs.db")}},
            "media_store_path": str(self.folder / "media"),
            "registration_shared_secret": self.secret,
            "report_stats": False,
            "macaroon_secret_key": self.secret + "m",
            "form_secret": self.secret + "f",
            "signing_key_path": str(self.folder / "signing.key"),
            "trusted_key_servers": [],
            "federation_domain_whitelist": [],
            "suppress_key_server_warning": True,
            "enable_metrics": False,
            "url_preview_enabled": False,
            "presence": {"enabled": False},
            "rc_message": unlimited,
            "rc_registration": unlimited,
            "rc_login": {"address": unlimited, "account": unlimited, "failed_attempts": unlimited},
            "rc_joins": {"local": unlimited, "remote": unlimited},
            "rc_invites": {"per_room": unlimited, "per_user": unlimited, "per_issuer": unlimited},
            "rc_admin_redaction": unlimited,
            "rc_3pid_validation": unlimited,
            "rc_media_create": unlimited,
            "log_config": str(self.folder / "log.yaml"),
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        self.config.write_text(json.dumps(config))
        (self.folder / "log.yaml").write_text(
            json.dumps(
                {
                    "version": 1,
                    "formatters": {
                        "plain": {"format": "%(asctime)s %(name)s %(levelname)s %(message)s"}
                    },
                    "handlers": {
                        "file": {
                            "class": "logging.FileHandler",
                            "formatter": "plain",
                            "filename": str(self.folder / "homeserver.log"),
                        }
                    },
                    "root": {"level": "WARNING", "handlers": ["file"]},
                    "disable_existing_loggers": False,
                }
            )
        )

    def start(self) -> Synapse:
        python = str(CACHE / "synapse" / "bin" / "python")
        if not self.config.exists():
            self._write_config()
            subprocess.run(
                [python, "-m", "synapse.app.homeserver", "-c", str(self.config), "--generate-keys"],
                check=True,
                capture_output=True,
            )
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [python, "-m", "synapse.app.homeserver", "-c", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"synapse exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1, verify=TLS).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"synapse did not start: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None

    def register(self, localpart: str, admin: bool = False) -> MatrixUser:
        """A new user (shared-secret registration), logged in."""
        nonce = httpx.get(f"{self.url}/_synapse/admin/v1/register").json()["nonce"]
        password = "pw-" + localpart
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        mac.update(
            b"\x00".join(
                [
                    nonce.encode(),
                    localpart.encode(),
                    password.encode(),
                    b"admin" if admin else b"notadmin",
                ]
            )
        )
        answer = httpx.post(
            f"{self.url}/_synapse/admin/v1/register",
            json={
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            },
        )
        answer.raise_for_status()
        body = answer.json()
        return MatrixUser(self, body["user_id"], body["access_token"])


class MatrixUser:
    """A person (or the bot) on the test homeserver, speaking the client-server API."""

    def __init__(self, server: Synapse, user_id: str, token: str) -> None:
        self.server = server
        self.user_id = user_id
        self.token = token
        self._txn = 0

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> Any:
        response = httpx.request(
            method,
            f"{self.server.url}{path}",
            headers={"Authorization": f"Bearer {self.token}", **(headers or {})},
            timeout=30,
            **kwargs,
        )
        response.raise_for_status()
        return response.json()

    def create_room(self, invite: list[str], direct: bool = False, name: str = "") -> str:
        body: dict[str, Any] = {"invite": invite, "is_direct": direct, "preset": "private_chat"}
        if name:
            body["name"] = name
        return str(self.call("POST", "/_matrix/client/v3/createRoom", json=body)["room_id"])

    def join(self, room_id: str) -> None:
        self.call("POST", f"/_matrix/client/v3/join/{room_id}", json={})

    def say(self, room_id: str, text: str, **content: Any) -> str:
        self._txn += 1
        path = f"/_matrix/client/v3/rooms/{room_id}/send/m.room.message/t{time.time_ns()}"
        body = {"msgtype": "m.text", "body": text, **content}
        return str(self.call("PUT", path, json=body)["event_id"])

    def react(self, room_id: str, event_id: str, key: str) -> str:
        """React to an event (an `m.annotation`)."""
        path = f"/_matrix/client/v3/rooms/{room_id}/send/m.reaction/r{time.time_ns()}"
        relates = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
        return str(self.call("PUT", path, json={"m.relates_to": relates})["event_id"])

    def messages(self, room_id: str) -> list[dict[str, Any]]:
        """The room's messages, oldest first."""
        page = self.call(
            "GET",
            f"/_matrix/client/v3/rooms/{room_id}/messages",
            params={"dir": "b", "limit": 200},
        )
        return [e for e in reversed(page["chunk"]) if e["type"] == "m.room.message"]
