"""A real local mail system for the e-mail channel's tests: pymap (IMAP, maildir on disk) and
aiosmtpd (SMTP) in one process, run with the cached mail venv's Python
(scripts/install-channel-servers.sh), never the project's.

    mailserver.py DIR IMAP_PORT SMTP_PORT USER:PASSWORD ...

Each user has a maildir under DIR; SMTP delivers every recipient whose local part names a
user into that user's INBOX (so a Bcc to oneself lands in one's own INBOX, as on most hosts),
and other recipients into the catch-all user `outside`. Mail survives a restart (maildir).
"""

from __future__ import annotations

import mailbox
import os
import sys
from pathlib import Path
from typing import Any


def write_users(base: Path, users: dict[str, str]) -> None:
    from pysasl.hashing import BuiltinHash

    hashing = BuiltinHash(rounds=1000)  # a test server: fast logins
    with open(base / "pymap-etc-passwd", "w") as passwd:
        for name in users:
            passwd.write(f"{name}:x::::{name}:\n")
    with open(base / "pymap-etc-shadow", "w") as shadow:
        for name, password in users.items():
            shadow.write(f"{name}:{hashing.hash(password)}:::::::\n")
    for name in users:
        mailbox.Maildir(base / name, create=True)


class Delivery:
    """aiosmtpd handler: each recipient's copy goes into its user's maildir INBOX."""

    def __init__(self, base: Path, users: set[str]) -> None:
        self.base = base
        self.users = users

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        for recipient in envelope.rcpt_tos:
            local = recipient.split("@", 1)[0].lower()
            user = local if local in self.users else "outside"
            box = mailbox.Maildir(self.base / user, create=True)
            box.add(envelope.original_content or envelope.content)
            box.close()
        return "250 OK delivered"


def main() -> None:
    base = Path(sys.argv[1]).resolve()
    imap_port, smtp_port = sys.argv[2], int(sys.argv[3])
    users = dict(arg.split(":", 1) for arg in sys.argv[4:])
    users.setdefault("outside", "outside")
    base.mkdir(parents=True, exist_ok=True)
    write_users(base, users)

    from aiosmtpd.controller import Controller

    controller = Controller(Delivery(base, set(users)), hostname="127.0.0.1", port=smtp_port)
    controller.start()
    sys.argv = [
        "pymap",
        "--no-service",
        "admin",
        "--no-service",
        "managesieve",
        "--host",
        "127.0.0.1",
        "--port",
        imap_port,
        "--no-tls",
        "maildir",
        str(base),
        "--layout",
        "++",
    ]
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    from pymap.main import main as pymap_main

    try:
        pymap_main()
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
