"""E-mail: IMAP in (IDLE, with a durable UIDVALIDITY/UID position), SMTP out.

A thread (Message-ID / In-Reply-To / References) is one conversation. The agent's messages go
only to the owner's address, threaded under the mail they answer; every Message-ID sent or
received is remembered, so the owner's reply joins its conversation. Mail from anyone but the
configured owner address is outside text. Each outbound mail's Message-ID derives from the
nightowl message id, and a copy goes to the channel's own address (Bcc): before a retry that
may repeat an earlier attempt, the relay looks for that copy in the mailbox and does not send
twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import email.utils
import hashlib
import html
import imaplib
import re
import select
import smtplib
import ssl
from dataclasses import replace
from email.message import EmailMessage
from html.parser import HTMLParser
from typing import Any, ClassVar

from nightowl.channels.base import (
    Accept,
    Capabilities,
    ChannelConfig,
    ChannelError,
    Delivered,
    Inbound,
    Outbound,
)
from nightowl.channels.email_auth import signed_by
from nightowl.channels.email_receive import SmtpReceiver
from nightowl.channels.render import markdown_html

TIMEOUT_S = 30.0


class _TextOfHtml(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in ("br", "p", "div", "li", "tr", "h1", "h2", "h3"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def html_text(markup: str) -> str:
    """The readable text of an HTML mail."""
    parser = _TextOfHtml()
    parser.feed(markup)
    text = html.unescape("".join(parser.parts))
    return re.sub(r"\n\s*\n+", "\n\n", text).strip()


def _without_quote(text: str) -> str:
    """The new part of a reply: the quoted tail ("On … wrote:" and "> " lines) dropped."""
    lines = text.rstrip().splitlines()
    while lines and (lines[-1].startswith(">") or not lines[-1].strip()):
        lines.pop()
    if lines and re.match(r"^On .+wrote:\s*$", lines[-1]):
        lines.pop()
    return "\n".join(lines).strip() or text.strip()


def _ids(value: str | None) -> list[str]:
    return re.findall(r"<[^<>\s]+>", value or "")


def parse_mail(raw: bytes, uid_key: str) -> Inbound:
    """An inbound event of a raw mail (the thread is its first reference or itself)."""
    mail = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(mail, EmailMessage)
    message_id = (_ids(str(mail.get("Message-ID", ""))) or [f"<{uid_key}@imap>"])[0]
    references = _ids(str(mail.get("References", "")))
    in_reply_to = _ids(str(mail.get("In-Reply-To", "")))
    thread_root = (references or in_reply_to or [message_id])[0]
    name, address = email.utils.parseaddr(str(mail.get("Reply-To") or mail.get("From", "")))
    _, sender = email.utils.parseaddr(str(mail.get("From", "")))
    body = mail.get_body(preferencelist=("plain", "html"))
    text = ""
    if body is not None:
        content = body.get_content()
        text = html_text(content) if body.get_content_type() == "text/html" else content
    files = []
    for part in mail.iter_attachments():
        data = part.get_payload(decode=True)
        if isinstance(data, bytes):
            files.append((str(part.get_filename() or "attachment"), part.get_content_type(), data))
    subject = str(mail.get("Subject", "")).strip()
    event = Inbound(
        event_id=message_id,
        thread_key=thread_root,
        sender=sender.lower(),
        sender_name=name,
        text=_without_quote(text),
        direct=True,
        title=subject,
        address={
            "subject": subject,
            "reply_to": address.lower(),
            "in_reply_to": message_id,
            "references": [*references, *in_reply_to, message_id][-10:],
        },
        refs=[*references, *in_reply_to, message_id],
        files=files,
    )
    return event


def _flag(value: object) -> bool:
    """A yes/no setting (a JSON boolean, or words from a command line)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "off", "0", "")
    return bool(value)


class EmailChannel:
    """A mailbox the agent reads (IMAP) and a server it sends through (SMTP)."""

    kind: ClassVar[str] = "email"
    capabilities: ClassVar[Capabilities] = Capabilities(
        files=True, html=True, check_before_retry=True
    )

    def __init__(self, config: ChannelConfig) -> None:
        s = config.settings
        self._config = config
        self.address = str(s.get("address") or "").lower()
        if "@" not in self.address:
            raise ChannelError("set address to the channel's own e-mail address", permanent=True)
        owner = s.get("owner") or []
        self.owners = [owner] if isinstance(owner, str) else [str(o) for o in owner]
        if not self.owners:
            raise ChannelError("set owner to the owner's e-mail address", permanent=True)
        # Mail comes in from an IMAP mailbox, or over SMTP from the owner's own MX.
        self.receive = str(s.get("receive") or "imap")
        if self.receive not in ("imap", "smtp"):
            raise ChannelError("set receive to imap or smtp", permanent=True)
        self.imap_host = str(s.get("imap_host") or "")
        if self.receive == "imap" and not self.imap_host:
            raise ChannelError("set imap_host (or receive=smtp with an MX)", permanent=True)
        self.imap_port = int(s.get("imap_port") or 993)
        self.imap_security = str(s.get("imap_security") or "tls")  # tls | starttls | none
        self.smtp_host = str(s.get("smtp_host") or self.imap_host)
        self.smtp_port = int(s.get("smtp_port") or 587)
        self.smtp_security = str(s.get("smtp_security") or "starttls")  # tls | starttls | none
        self.username = str(s.get("username") or self.address)
        self.mailbox = str(s.get("mailbox") or "INBOX")
        self.idle_s = float(s.get("idle_s") or 25.0)
        self.poll_s = float(s.get("poll_s") or 10.0)
        # The owner's mail counts as the owner's only with a DKIM signature of their domain.
        self.owner_dkim = _flag(s.get("owner_dkim", True))
        pinned = s.get("dkim_keys") or {}
        self.dkim_keys = (
            {str(k): str(v) for k, v in pinned.items()} if isinstance(pinned, dict) else {}
        )
        self.copy_to_self = _flag(s.get("copy_to_self", True))
        self.smtp_auth = _flag(s.get("smtp_auth", True))
        self._password = config.secret("password_secret")
        self._imap: imaplib.IMAP4 | None = None
        self.receiver: SmtpReceiver | None = None
        if self.receive == "smtp":
            self.receiver = SmtpReceiver(
                self.address,
                str(s.get("smtp_listen_host") or "127.0.0.1"),
                int(s.get("smtp_listen_port") or 2525),
                int(s.get("max_size_bytes") or 25_000_000),
            )

    # -- IMAP ------------------------------------------------------------------------------

    def _connect_imap(self) -> imaplib.IMAP4:
        if self.imap_security == "tls":
            imap: imaplib.IMAP4 = imaplib.IMAP4_SSL(
                self.imap_host,
                self.imap_port,
                ssl_context=ssl.create_default_context(),
                timeout=TIMEOUT_S,
            )
        else:
            imap = imaplib.IMAP4(self.imap_host, self.imap_port, timeout=TIMEOUT_S)
            if self.imap_security == "starttls":
                imap.starttls(ssl.create_default_context())
        try:
            imap.login(self.username, self._password)
        except imaplib.IMAP4.error as error:
            with contextlib.suppress(Exception):
                imap.logout()
            raise ChannelError(f"IMAP login as {self.username} failed: {error}") from None
        # Servers announce more once logged in (IDLE among them).
        _, data = imap.capability()
        if data and isinstance(data[-1], bytes):
            imap.capabilities = tuple(data[-1].decode("ascii", "replace").upper().split())
        return imap

    def _select(self, imap: imaplib.IMAP4) -> int:
        status, _ = imap.select(self.mailbox)
        if status != "OK":
            raise ChannelError(f"IMAP: no mailbox {self.mailbox!r}", permanent=True)
        validity = imap.response("UIDVALIDITY")[1]
        return int(validity[0]) if validity and validity[0] else 0

    def _uid_next(self, imap: imaplib.IMAP4) -> int:
        _, data = imap.status(self.mailbox, "(UIDNEXT)")
        found = re.search(rb"UIDNEXT (\d+)", data[0] or b"")
        return int(found.group(1)) if found else 1

    def _new_mail(self, imap: imaplib.IMAP4, after: int) -> list[tuple[int, bytes]]:
        imap.noop()  # some servers take in new mail of the selected mailbox only now
        _, data = imap.uid("SEARCH", f"UID {after + 1}:*")
        uids = sorted(int(u) for u in (data[0] or b"").split() if int(u) > after)
        found = []
        for uid in uids:
            _, fetched = imap.uid("FETCH", str(uid), "(BODY.PEEK[])")
            raw = next((part[1] for part in fetched if isinstance(part, tuple)), None)
            if raw is not None:
                found.append((uid, raw))
        return found

    def _idle(self, imap: imaplib.IMAP4, seconds: float) -> None:
        """Wait for the server to announce new mail (IDLE), at most `seconds`."""
        if "IDLE" not in imap.capabilities:  # poll
            select.select([], [], [], min(seconds, self.poll_s))
            return
        tag = b"NWIDLE"
        imap.send(tag + b" IDLE\r\n")
        line = imap.readline()
        if not line.startswith(b"+"):
            raise ChannelError(f"IMAP IDLE refused: {line[:200]!r}")
        select.select([imap.sock], [], [], seconds)
        imap.send(b"DONE\r\n")
        while True:
            line = imap.readline()
            if not line:
                raise ChannelError("IMAP connection closed during IDLE")
            if line.startswith(tag):
                return

    async def listen(self, position: dict[str, Any], accept: Accept) -> None:
        if self.receiver is not None:
            await self.receiver.run(position, accept, self._parse_received)
            return
        imap = await asyncio.to_thread(self._connect_imap)
        self._imap = imap
        try:
            validity = await asyncio.to_thread(self._select, imap)
            if position.get("uidvalidity") == validity:
                last = int(position.get("uid", 0))
            elif position:  # the mailbox was rebuilt: read it again (Message-IDs dedupe)
                last = 0
            else:  # first start: from now on
                last = await asyncio.to_thread(self._uid_next, imap) - 1
                await accept([], {"uidvalidity": validity, "uid": last})
            while True:
                mails = await asyncio.to_thread(self._new_mail, imap, last)
                if mails:
                    events = []
                    for uid, raw in mails:
                        event = parse_mail(raw, f"{validity}.{uid}")
                        if event.sender != self.address:  # not our own copies
                            event = await asyncio.to_thread(self._authenticated, event, raw)
                            events.append(self._for_owner(event))
                    last = mails[-1][0]
                    await accept(events, {"uidvalidity": validity, "uid": last})
                await asyncio.to_thread(self._idle, imap, self.idle_s)
        finally:
            self._imap = None
            await asyncio.to_thread(self._logout, imap)

    async def _parse_received(self, raw: bytes, key: str) -> Inbound | None:
        """A mail that came in over SMTP as an event (None for the channel's own copy)."""
        event = await asyncio.to_thread(parse_mail, raw, key)  # up to max_size_bytes
        if event.sender == self.address:
            return None
        event = await asyncio.to_thread(self._authenticated, event, raw)
        return self._for_owner(event)

    def _authenticated(self, event: Inbound, raw: bytes) -> Inbound:
        """A mail from the owner's address that the owner's domain did not sign is not the
        owner's (anyone can write a From header)."""
        if not self.owner_dkim or event.sender not in {o.lower() for o in self.owners}:
            return event
        domain = event.sender.rsplit("@", 1)[-1]
        if signed_by(raw, domain, self.dkim_keys):
            return event
        return replace(event, verified=False)

    def _for_owner(self, event: Inbound) -> Inbound:
        """Replies go to the owner: threaded under the owner's own mail, or as a new thread
        about someone else's (never to the other sender)."""
        subject = event.title or "(no subject)"
        if event.verified and event.sender in {o.lower() for o in self.owners}:
            reply = subject if subject.lower().startswith("re:") else f"Re: {subject}"
            address = {**event.address, "subject": reply}
        else:
            address = {"subject": f"About: {subject} (from {event.sender})"}
        return replace(event, address=address)

    def folder_news(
        self, folder: str, since: tuple[str, int] | None, limit: int
    ) -> tuple[str, int, int, list[str]]:
        """For a routine's watch: a folder's UIDVALIDITY and next UID, how many mails came
        since `since` (the UIDVALIDITY and next UID seen before; None: only look) and are
        still there, and a line for each of the newest `limit` of them. The folder is only
        examined (read-only): nothing is marked seen. ChannelError when it cannot be read."""
        if not self.imap_host:
            raise ChannelError(f"the channel {self._config.name} reads no IMAP mailbox")
        imap = self._connect_imap()
        try:
            status, _ = imap.select(f'"{folder}"', readonly=True)
            if status != "OK":
                raise ChannelError(f"the mailbox has no folder {folder!r}")
            found = imap.response("UIDVALIDITY")[1]
            validity = found[0].decode() if found and isinstance(found[0], bytes) else "0"
            _, data = imap.status(f'"{folder}"', "(UIDNEXT)")
            match = re.search(rb"UIDNEXT (\d+)", data[0] or b"")
            uid_next = int(match.group(1)) if match else 1
            if since is None or since[0] != validity or uid_next <= since[1]:
                return validity, uid_next, 0, []
            _, data = imap.uid("SEARCH", f"UID {since[1]}:*")
            uids = sorted(int(u) for u in (data[0] or b"").split() if int(u) >= since[1])
            lines = [self._summary(imap, uid) for uid in uids[-limit:]] if limit else []
            return validity, uid_next, len(uids), lines
        except (imaplib.IMAP4.error, OSError) as error:
            raise ChannelError(f"IMAP: {type(error).__name__}: {error}") from None
        finally:
            self._logout(imap)

    @staticmethod
    def _summary(imap: imaplib.IMAP4, uid: int) -> str:
        """One line for a mail: who sent it, its subject and date (outside text)."""
        fields = "(BODY.PEEK[HEADER.FIELDS (FROM SUBJECT DATE)])"
        _, fetched = imap.uid("FETCH", str(uid), fields)
        raw = next((part[1] for part in fetched if isinstance(part, tuple)), b"")
        head = email.message_from_bytes(raw, policy=email.policy.default)
        sender = " ".join(str(head.get("From", "")).split()) or "(no sender)"
        subject = " ".join(str(head.get("Subject", "")).split()) or "(no subject)"
        return f"from {sender[:200]}: {subject[:300]} ({str(head.get('Date', ''))[:60]})"

    @staticmethod
    def _logout(imap: imaplib.IMAP4) -> None:
        with contextlib.suppress(Exception):
            imap.logout()

    # -- SMTP ------------------------------------------------------------------------------

    def _message_id(self, outbound: Outbound) -> str:
        domain = self.address.split("@", 1)[1]
        return f"<{outbound.message_id}.nightowl@{domain}>"

    def _compose(self, outbound: Outbound) -> EmailMessage:
        mail = self.compose(
            self.owners,
            str(outbound.address.get("subject") or "A message from nightowl"),
            outbound.text,
            self._message_id(outbound),
        )
        reply_to = outbound.address.get("in_reply_to")
        if reply_to:
            mail["In-Reply-To"] = str(reply_to)
            mail["References"] = " ".join(outbound.address.get("references") or [reply_to])
        for name, content_type, data in outbound.files:
            main, _, sub = (content_type or "application/octet-stream").partition("/")
            mail.add_attachment(data, maintype=main, subtype=sub or "octet-stream", filename=name)
        return mail

    def compose(self, to: list[str], subject: str, text: str, message_id: str) -> EmailMessage:
        """A mail from the channel's address: markdown as plain text and as HTML."""
        mail = EmailMessage()
        mail["From"] = self.address
        mail["To"] = ", ".join(to)
        mail["Subject"] = subject
        mail["Message-ID"] = message_id
        mail["Date"] = email.utils.formatdate(localtime=False)
        mail.set_content(text)
        mail.add_alternative(markdown_html(text), subtype="html")
        return mail

    def send_id(self, key: str) -> str:
        """The Message-ID of a send to a third party (`send_message`), made from its key."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        return f"<send.{digest}.nightowl@{self.address.split('@', 1)[1]}>"

    def _smtp(self) -> smtplib.SMTP:
        if self.smtp_security == "tls":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                self.smtp_host,
                self.smtp_port,
                timeout=TIMEOUT_S,
                context=ssl.create_default_context(),
            )
        else:
            smtp = smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=TIMEOUT_S)
            if self.smtp_security == "starttls":
                smtp.starttls(context=ssl.create_default_context())
        if self.smtp_auth:
            smtp.login(self.username, self._password)
        return smtp

    def send(self, mail: EmailMessage, to: list[str]) -> None:
        """Send over SMTP to `to` (and a Bcc copy to the channel's own address, which is what
        a check before a retry looks for); ChannelError says what failed."""
        recipients = [*to, *([self.address] if self.copy_to_self else [])]
        try:
            with self._smtp() as smtp:
                refused = smtp.send_message(mail, from_addr=self.address, to_addrs=recipients)
        except smtplib.SMTPRecipientsRefused as error:
            raise ChannelError(f"SMTP refused the recipients: {error}", permanent=True) from None
        except smtplib.SMTPResponseException as error:
            permanent = 500 <= error.smtp_code < 600 and error.smtp_code != 554
            raise ChannelError(
                f"SMTP said {error.smtp_code} {error.smtp_error!r}", permanent=permanent
            ) from None
        except (smtplib.SMTPException, OSError) as error:
            raise ChannelError(f"SMTP: {type(error).__name__}: {error}") from None
        missed = [r for r in to if r in refused]  # only the own copy may be refused quietly
        if missed:
            raise ChannelError(f"SMTP refused {', '.join(missed)}: {refused}", permanent=True)

    def _delivered(self, outbound: Outbound) -> Delivered:
        sent = self._message_id(outbound)
        references = [*(outbound.address.get("references") or []), sent][-10:]
        return Delivered(sent, {"in_reply_to": sent, "references": references})

    async def deliver(self, outbound: Outbound) -> Delivered:
        mail = self._compose(outbound)
        await asyncio.to_thread(self.send, mail, self.owners)
        return self._delivered(outbound)

    @property
    def can_check(self) -> bool:
        """Whether the channel can tell that a mail it sent went out: its own Bcc copy is
        looked for in its IMAP mailbox, or among the copies its SMTP listener received."""
        return self.copy_to_self and (self.receiver is not None or bool(self.imap_host))

    def has(self, message_id: str) -> bool:
        """Whether the channel's own copy of a mail with this Message-ID arrived (where its
        mail comes in: the SMTP listener, or the IMAP mailbox)."""
        if self.receiver is not None:
            return self.receiver.has_copy(message_id)
        imap = self._connect_imap()
        try:
            self._select(imap)
            _, data = imap.uid("SEARCH", "HEADER", "Message-ID", f'"{message_id}"')
            return bool((data[0] or b"").split())
        finally:
            self._logout(imap)

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        if not self.can_check:
            return None
        try:
            found = await asyncio.to_thread(self.has, self._message_id(outbound))
        except (imaplib.IMAP4.error, OSError) as error:
            raise ChannelError(f"IMAP check before retry failed: {error}") from None
        return self._delivered(outbound) if found else None

    def _test(self) -> str:
        if self.receiver is not None:
            with self._smtp() as smtp:
                smtp.noop()
            assert self.receiver is not None
            return (
                f"SMTP {self.smtp_host}:{self.smtp_port} ok; mail is received over SMTP on "
                f"{self.receiver.host}:{self.receiver.port}"
            )
        imap = self._connect_imap()
        try:
            self._select(imap)
            count = imap.response("EXISTS")[1]
        finally:
            self._logout(imap)
        with self._smtp() as smtp:
            smtp.noop()
        mails = int(count[-1]) if count and count[-1] else 0
        return (
            f"IMAP {self.username}@{self.imap_host}:{self.imap_port} ({self.mailbox}: {mails} "
            f"mails), SMTP {self.smtp_host}:{self.smtp_port} ok"
        )

    async def test(self) -> str:
        try:
            return await asyncio.to_thread(self._test)
        except (imaplib.IMAP4.error, smtplib.SMTPException, OSError) as error:
            raise ChannelError(f"{type(error).__name__}: {error}") from None

    async def close(self) -> None:
        imap, self._imap = self._imap, None
        if imap is not None:
            with contextlib.suppress(Exception):
                imap.shutdown()
