"""`send_message` to an e-mail address, sent as a real mail through the owner's mail channel.

The owner confirmed a draft; the runtime sends it exactly once (safety/sends.py): the intent is
committed before the SMTP transaction, under a key the mail's Message-ID is made from, and the
mail goes with a Bcc copy to the channel's own address. A server killed between the SMTP
transaction and recording it finds, on recovery, that copy in the channel's mailbox by
Message-ID and records the send instead of sending again. Without a copy to look for
(`copy_to_self` off) it cannot tell, and says so rather than risk a second mail.
"""

from __future__ import annotations

import asyncio
import imaplib
import re
import time
from typing import Any

from sqlalchemy.orm import Session

from nightowl.channels.base import ChannelConfig, ChannelError
from nightowl.channels.email import EmailChannel
from nightowl.safety.sends import Sender, SendFailed
from nightowl.safety.vault import open_secrets
from nightowl.store.channels import list_channels

# How long a copy may take to reach the mailbox after the SMTP server took the mail.
SETTLE_S = 30.0
SETTLE_POLL_S = 2.0
_ADDRESS = re.compile(r"[^@\s,;<>\"']+@[^@\s,;<>\"']+\.[^@\s,;<>\"']+")


class EmailSender:
    """Sends confirmed `send_message` drafts as mail through one e-mail channel."""

    def __init__(self, channel: EmailChannel) -> None:
        self.channel = channel

    def connector(self) -> dict[str, Any]:
        hosts = {f"{self.channel.smtp_host}:{self.channel.smtp_port}"}
        if self.channel.imap_host:
            hosts.add(f"{self.channel.imap_host}:{self.channel.imap_port}")
        return {"service": f"e-mail ({self.channel.address})", "hosts": sorted(hosts)}

    async def send(self, key: str, payload: dict[str, Any]) -> str:
        to = str(payload.get("to") or "").strip()
        if not _ADDRESS.fullmatch(to):
            raise SendFailed(f"{to!r} is not one e-mail address; nothing was sent")
        subject = " ".join(str(payload.get("subject") or "").split())  # no line breaks
        message_id = self.channel.send_id(key)
        try:
            mail = self.channel.compose([to], subject, str(payload.get("text") or ""), message_id)
        except ValueError as error:
            raise SendFailed(f"the mail could not be written ({error}); nothing was sent") from None
        try:
            await asyncio.to_thread(self.channel.send, mail, [to])
        except ChannelError as error:
            raise SendFailed(f"the mail was not sent: {error}") from None
        return message_id

    async def lookup(self, key: str) -> str | None:
        """The earlier attempt's Message-ID if its copy is in the mailbox. A copy can take a
        while to arrive after the SMTP server took the mail, so it is looked for again for
        `SETTLE_S` before the answer is no (and the mail is sent again)."""
        message_id = self.channel.send_id(key)
        if not self.channel.can_check or self.channel.receive == "smtp":
            # Without a mailbox to look in (copies come back only through the listener, and
            # the MX may retry them minutes later) nobody can tell: say so, send nothing.
            raise SendFailed(
                "the server stopped during the send, and nightowl cannot check whether the "
                "mail went out (no IMAP mailbox with the channel's own copies)",
                uncertain=True,
            )
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                found = await asyncio.to_thread(self.channel.has, message_id)
            except (imaplib.IMAP4.error, ChannelError, OSError) as error:
                raise SendFailed(
                    f"the server stopped during the send and the mailbox could not be checked "
                    f"({error})",
                    uncertain=True,
                ) from None
            if found:
                return message_id
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(SETTLE_POLL_S)


def email_sender(
    session: Session, vault_key: bytes, owner_id: str, tool: str, payload: dict[str, Any]
) -> Sender | None:
    """The owner's mail channel as the sender of a `send_message` to an e-mail address (the
    first e-mail channel configured), or None: the send goes to the HTTP send provider."""
    if tool != "send_message" or "@" not in str(payload.get("to") or ""):
        return None
    for info in list_channels(session, owner_id):
        if info.kind != "email":
            continue
        secrets = open_secrets(session, vault_key, owner_id)
        config = ChannelConfig(info.id, info.name, info.owner_id, info.settings, secrets)
        try:
            channel = EmailChannel(config)
        except ChannelError:
            continue  # misconfigured: `nightowl channels test` says why
        if channel.receiver is not None:  # the own copies its SMTP listener stored so far
            channel.receiver.own_copies = list(info.position.get("own_copies", []))
        return EmailSender(channel)
    return None
