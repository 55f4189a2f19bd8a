"""A real local mail system for the e-mail channel's tests: pymap (IMAP, maildir on disk) and
aiosmtpd (SMTP) in one process, run with the cached mail venv's Python
(scripts/install-channel-servers.sh), never the project's.

    mailserver.py DIR IMAP_PORT SMTP_PORT USER:PASSWORD ...

Each user has a maildir under DIR; SMTP delivers every recipient whose local part names a
user into that user's INBOX (so a Bcc to oneself lands in one's own INBOX, as on most hosts),
and other recipients into the catch-all user `outside`. Mail survives a restart (maildir).

Like a real mail host, a mail is accepted whole or not at all: it goes into a spool file first
(one atomic rename), and only then into each recipient's maildir, under a name made from the
spool file and the recipient; a mail whose delivery a kill cut short is finished when the
server starts again, and a copy already delivered is not delivered twice. (Delivering copy
after copy with nothing in between let a kill leave the owner's copy and lose the sender's
own Bcc copy: a sender that checks for that copy before retrying then sent twice.)

While a file `hold` exists in DIR, the answer to a mail's DATA is held back (the mail is
already delivered): a test kills the sender in that window.
"""

from __future__ import annotations

import asyncio
import json
import mailbox
import os
import sys
import uuid
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
    """aiosmtpd handler: a mail is spooled, then each recipient's copy goes into its user's
    maildir INBOX."""

    def __init__(self, base: Path, users: set[str]) -> None:
        self.base = base
        self.users = users
        self.spool = base / "spool"
        self.spool.mkdir(exist_ok=True)

    def _deliver(self, spooled: Path) -> None:
        mail = json.loads(spooled.read_text())
        content = mail["content"].encode("latin-1")
        for n, recipient in enumerate(mail["rcpt_tos"]):
            local = recipient.split("@", 1)[0].lower()
            box = self.base / (local if local in self.users else "outside")
            mailbox.Maildir(box, create=True).close()
            name = f"{spooled.stem}.{n}"
            delivered = [found.name for sub in ("new", "cur") for found in (box / sub).iterdir()]
            if any(found.startswith(name) for found in delivered):
                continue  # delivered before the kill
            staged = box / "tmp" / name
            staged.write_bytes(content)
            os.replace(staged, box / "new" / name)
        spooled.unlink()

    def finish_spooled(self) -> None:
        """Deliver what a kill left in the spool."""
        for spooled in sorted(self.spool.glob("*.json")):
            self._deliver(spooled)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.original_content or envelope.content
        record = {"rcpt_tos": list(envelope.rcpt_tos), "content": raw.decode("latin-1")}
        staged = self.spool / f"{uuid.uuid4().hex}.part"
        staged.write_text(json.dumps(record))
        spooled = staged.with_suffix(".json")
        os.replace(staged, spooled)  # accepted: from here the mail reaches every recipient
        self._deliver(spooled)
        # A test holds the answer back (the mail is delivered, the sender does not know yet)
        # while the file `hold` exists: time to kill the sender in between.
        while (self.base / "hold").exists():
            await asyncio.sleep(0.05)
        return "250 OK delivered"


def main() -> None:
    base = Path(sys.argv[1]).resolve()
    imap_port, smtp_port = sys.argv[2], int(sys.argv[3])
    users = dict(arg.split(":", 1) for arg in sys.argv[4:])
    users.setdefault("outside", "outside")
    base.mkdir(parents=True, exist_ok=True)
    write_users(base, users)

    from aiosmtpd.controller import Controller

    delivery = Delivery(base, set(users))
    delivery.finish_spooled()
    controller = Controller(delivery, hostname="127.0.0.1", port=smtp_port)
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
