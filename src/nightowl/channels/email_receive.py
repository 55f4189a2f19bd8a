"""E-mail in over SMTP, for self-hosters who run their own mail exchanger (MX).

The MX (postfix, exim, …) forwards the channel's address to this listener instead of a mailbox
(`receive: smtp`). SMTP itself makes it durable: a mail is answered `250` only after the inbox
stored it (and the router deduped it by Message-ID), so a mail the server did not store is
still the sending host's, which retries after a `451` or a dropped connection. Only the
channel's own address is accepted as a recipient (no relaying), up to `max_size_bytes`.

The channel's own Bcc copies (what a check before a retry looks for) come back here too when
the MX delivers the channel's address to it: their Message-IDs are kept in the listener's
stored position (the newest `OWN_COPIES`), stored before the copy is answered `250`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nightowl.channels.base import Accept, Inbound

if TYPE_CHECKING:  # aiosmtpd loads when a listener starts (0.2-0.5 s of every server start)
    from aiosmtpd.smtp import SMTP, Envelope, Session

log = logging.getLogger(__name__)

OWN_COPIES = 500  # Message-IDs of the channel's own copies kept in its position

Parse = Callable[[bytes, str], Awaitable[Inbound | None]]  # None: the channel's own copy


class _Handler:
    """aiosmtpd's handler: recipients checked, each mail stored before it is answered."""

    def __init__(self, address: str, store: Callable[[bytes], Awaitable[None]]) -> None:
        self.address = address
        self.store = store

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if address.strip().lower() != self.address:
            return "550 5.1.1 no such recipient here (this host does not relay)"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or envelope.content
        if not isinstance(raw, bytes):
            raw = str(raw or "").encode("utf-8", "surrogateescape")
        try:
            await self.store(raw)
        except Exception as error:  # not stored: the sending host keeps it and retries
            log.warning("mail not stored; answered 451", extra={"error": repr(error)})
            return "451 4.3.0 could not store the mail now; try again later"
        return "250 OK stored"


class SmtpReceiver:
    """Listens for mail on `host:port` until cancelled; hands each mail to `accept`."""

    def __init__(self, address: str, host: str, port: int, max_size_bytes: int) -> None:
        self.address = address.lower()
        self.host, self.port = host, port
        self.max_size_bytes = max_size_bytes
        self.own_copies: list[str] = []
        self._lock = asyncio.Lock()  # one mail stored (with the position) at a time

    def has_copy(self, message_id: str) -> bool:
        """Whether the channel's own copy of a mail with this Message-ID came in."""
        return message_id in self.own_copies

    async def run(self, position: dict[str, Any], accept: Accept, parse: Parse) -> None:
        self.own_copies = [str(m) for m in position.get("own_copies", [])][-OWN_COPIES:]

        async def store(raw: bytes) -> None:
            key = hashlib.sha256(raw).hexdigest()[:24]
            event = await parse(raw, key)
            own = await asyncio.to_thread(_message_id, raw) if event is None else ""
            async with self._lock:
                if event is None:  # the channel's own copy: remembered, not a message
                    message_id = own
                    if message_id and message_id not in self.own_copies:
                        self.own_copies = [*self.own_copies, message_id][-OWN_COPIES:]
                    await accept([], {"own_copies": self.own_copies})
                else:
                    await accept([event], {"own_copies": self.own_copies})

        handler = _Handler(self.address, store)
        sessions: weakref.WeakSet[SMTP] = weakref.WeakSet()
        smtp_class = await asyncio.to_thread(_smtp_class)  # an import: off the event loop

        def session() -> SMTP:
            smtp = smtp_class(
                handler,
                data_size_limit=self.max_size_bytes,
                hostname=self.address.split("@", 1)[1],
                ident="nightowl",
            )
            sessions.add(smtp)
            return smtp

        server = await asyncio.get_running_loop().create_server(session, self.host, self.port)
        try:
            await accept([], {"own_copies": self.own_copies})  # listening: the channel is ok
            await asyncio.Event().wait()  # until cancelled
        finally:
            server.close()
            # Sessions still open end too: a stopped or reconfigured channel stores nothing
            # more (their mail was not answered 250, so the sending host keeps it).
            for smtp in list(sessions):
                if smtp.transport is not None:
                    smtp.transport.close()


def _smtp_class() -> type[SMTP]:
    from aiosmtpd.smtp import SMTP

    return SMTP


def _message_id(raw: bytes) -> str:
    import email
    import email.policy

    mail = email.message_from_bytes(raw, policy=email.policy.default)
    return str(mail.get("Message-ID", "")).strip()
