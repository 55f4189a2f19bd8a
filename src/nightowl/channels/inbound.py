"""Inbound events from a channel become triggers: identity → trust, thread → conversation,
then the router (dedupe by the channel's event id, batching, priorities), then the position.

The position is stored only after the router has stored the events: a crash in between
redelivers them, and the router drops what it has seen.

A reaction is never a message: the owner's reaction to an open question's event answers it,
and otherwise the owner's 👎 on an agent message's event marks that reply wrong (a draft eval
case, once per message, as the web app's "Wrong?" does). Anyone else's reaction does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nightowl.channels.base import Inbound, is_owner
from nightowl.evals.capture import mark_wrong
from nightowl.router.priority import Priority
from nightowl.router.router import IncomingMessage, Router
from nightowl.store.channels import (
    ChannelInfo,
    delivered_as,
    readdress,
    remember_refs,
    save_position,
    sending,
    set_status,
    thread_of,
)
from nightowl.store.conversations import title_if_untitled
from nightowl.store.database import Database
from nightowl.store.errors import Conflict, Invalid, NotFound
from nightowl.store.questions import (
    answer_by_reaction,
    answer_in_words,
    controls_of,
    open_question,
    validate_answer,
)

log = logging.getLogger(__name__)

# Where a received file goes when the computers are on a tier: (owner id, path in the home,
# bytes), written inside the computer as its user (RemoteComputers.put_file).
FileDrop = Callable[[str, str, bytes], Awaitable[None]]


MAX_TEXT_CHARS = 32_000
# How long a reaction or a button press waits for the send it names to be recorded.
REACTION_SETTLE_S = 10.0
THUMBS_DOWN = "\U0001f44e"
# A reaction's key may carry a variation selector or a skin tone: still a thumbs-down.
_EMOJI_MODIFIERS = dict.fromkeys([0xFE0F, *range(0x1F3FB, 0x1F400)])
# What a case made from a reaction says until the owner writes what should have happened.
REACTION_NOTE = (
    "Marked wrong with a \U0001f44e reaction on {channel}: edit this to say what should have "
    "happened."
)


def is_thumbs_down(key: str) -> bool:
    """Whether a reaction's key is a thumbs-down (👎, with or without a skin tone)."""
    return key.strip().translate(_EMOJI_MODIFIERS) == THUMBS_DOWN


def write_new_file(home: Path, folder: str, name: str, data: bytes) -> None:
    """Write `home/folder/name` (readable by the computer's user) following no link: the
    folder is opened without following one (ELOOP if it is a link), the file written new
    beside it and renamed into place (one already there, the same event stored before, is
    kept as it is)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    top = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o755, dir_fd=top)
        inner = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    finally:
        os.close(top)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.stat(name, dir_fd=inner, follow_symlinks=False)
            return  # stored before, whole (a file appears only once written: below)
        partial = f".{name}.partial"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial, dir_fd=inner)  # a crash mid-write (unlink follows no link)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(partial, flags, 0o644, dir_fd=inner), "wb") as file:
            file.write(data)
        os.rename(partial, name, src_dir_fd=inner, dst_dir_fd=inner)
    finally:
        os.close(inner)


def storable(text: str) -> str:
    """Text any store takes: no NUL (PostgreSQL refuses it), no lone surrogates, bounded (a
    huge mail is cut, saying so)."""
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n\n[cut: {len(text) - MAX_TEXT_CHARS:,} more characters]"
    return text


def owners_of(settings: dict[str, Any]) -> list[str]:
    """The external identities a channel's settings name as the owner's."""
    owner = settings.get("owner") or []
    return [owner] if isinstance(owner, str) else [str(o) for o in owner]


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name.strip()).strip("._") or "file"
    return cleaned[-100:]


def _not_saved(channel: ChannelInfo, name: str, error: Exception, why: str) -> str:
    """Log why a received file was not saved; what the message says about it."""
    log.warning(
        "a received file was not saved",
        extra={"channel": channel.name, "why": str(error)[:200]},
    )
    return f"{_safe_name(name)} (not saved: {why})"


def _files_note(saved: list[str]) -> str:
    """What a message with files says about them, after its text."""
    return "\n\n(files received, saved as: " + ", ".join(saved) + ")"


class ChannelInbox:
    """Stores a channel's inbound events through the router, then its resume position."""

    def __init__(
        self,
        database: Database,
        router: Router,
        homes_dir: Path | None = None,
        vault_key: bytes | None = None,
        file_drop: FileDrop | None = None,
    ) -> None:
        self._database = database
        self._router = router
        self._homes_dir = homes_dir
        self._file_drop = file_drop  # the computers are on a tier: files go there
        self._vault_key = vault_key  # redacts the owner's secrets from a case a 👎 makes

    def _save_files(self, channel: ChannelInfo, event: Inbound) -> str:
        """Received files go to the owner's home (`~/inbox/`), where the agent's tools read
        them; what the message says about them. Written without following a link (the
        agent's computer may have made `~/inbox` one, to anywhere on this machine), each file
        new (the same event again finds it there)."""
        if not event.files or self._homes_dir is None or self._file_drop is not None:
            return ""
        home = self._homes_dir / channel.owner_id
        saved = []
        for kept, name, data in _kept_names(channel, event):
            try:
                write_new_file(home, "inbox", kept, data)
            except OSError as error:
                saved.append(_not_saved(channel, name, error, "~/inbox is not a folder"))
            else:
                saved.append(f"~/inbox/{kept} ({len(data):,} bytes)")
        return _files_note(saved)

    async def _drop_files(self, channel: ChannelInfo, event: Inbound) -> str:
        """Received files written into the owner's computer on its host (a computer tier),
        inside it as its user; what the message says about them."""
        assert self._file_drop is not None
        saved = []
        for kept, name, data in _kept_names(channel, event):
            try:
                await self._file_drop(channel.owner_id, f"~/inbox/{kept}", data)
            except Exception as error:  # the host refused or is away: said, not fatal
                why = "the computer could not take it"
                saved.append(_not_saved(channel, name, error, why))
            else:
                saved.append(f"~/inbox/{kept} ({len(data):,} bytes)")
        return _files_note(saved)

    async def accept(
        self, channel: ChannelInfo, events: list[Inbound], position: dict[str, Any] | None
    ) -> list[str]:
        """Store the events (each once) and then the position (None: events pushed over HTTP
        move no stored position); their conversation ids."""
        notes: dict[int, str] = {}
        if self._file_drop is not None:  # files of the events that become messages
            for n, event in enumerate(events):
                if event.files and not event.reaction_to and (event.direct or event.addressed):
                    notes[n] = await self._drop_files(channel, event)
        conversations = await asyncio.to_thread(self._accept, channel, events, position, notes)
        return conversations

    def _accept(
        self,
        channel: ChannelInfo,
        events: list[Inbound],
        position: dict[str, Any] | None,
        notes: dict[int, str] | None = None,
    ) -> list[str]:
        owners = owners_of(channel.settings)
        conversations = []
        for n, event in enumerate(events):
            owner = event.verified and is_owner(event.sender, owners)
            if event.reaction_to:  # an answer, or a reply marked wrong: only the owner's
                if not owner:
                    if event.answer is not None:
                        log.warning(
                            "a button press by someone not the owner was refused",
                            extra={"channel": channel.name, "sender": event.sender[:200]},
                        )
                    elif is_thumbs_down(event.text):
                        log.info(
                            "a thumbs-down by someone not the owner was refused",
                            extra={"channel": channel.name, "sender": event.sender[:200]},
                        )
                    continue
                if answered := self._answered_by_reaction(channel, event):
                    conversations.append(answered)
                elif event.answer is None and is_thumbs_down(event.text):
                    self._mark_wrong(channel, event)
                continue
            if not event.direct and not event.addressed:
                continue  # a group chat the agent was not addressed in
            with self._database.write() as session:
                thread = thread_of(
                    session,
                    channel,
                    event.thread_key,
                    kind="direct" if event.direct else "group",
                    title=storable(event.title)[:300],
                    address=event.address,
                    refs=event.refs,
                )
                remember_refs(session, channel.id, thread.conversation_id, [*event.refs])
                if not thread.created and event.address:
                    readdress(session, channel.id, thread.conversation_id, event.address)
                if event.title:
                    title_if_untitled(session, thread.conversation_id, storable(event.title))
            if owner and self._answered(channel, thread.conversation_id, event):
                conversations.append(thread.conversation_id)
                continue
            trust = "owner" if owner else "untrusted"
            said = storable(event.text if owner else _outside(event))
            text = said + ((notes or {}).get(n) or self._save_files(channel, event))
            urgent = owner and event.direct
            accepted = self._router.accept(
                IncomingMessage(
                    source=channel.kind,
                    idempotency_key=f"{channel.id}:{event.event_id}"[:300],
                    conversation_id=thread.conversation_id,
                    text=text,
                    trust=trust,
                    priority=Priority.OWNER_DIRECT if urgent else Priority.GROUP,
                    author_id=channel.owner_id if owner else None,
                )
            )
            log.info(
                "channel event accepted",
                extra={
                    "channel": channel.name,
                    "conversation_id": thread.conversation_id,
                    "duplicate": accepted.duplicate,
                },
            )
            conversations.append(thread.conversation_id)
        with self._database.write() as session:
            if position is not None:
                save_position(session, channel.id, position)
            set_status(session, channel.id, "ok")
        return conversations

    def _answered(self, channel: ChannelInfo, conversation_id: str, event: Inbound) -> bool:
        """The owner's reply answers the question the conversation waits on ("Approve", a
        button's label, "send" or "discard" for a draft): stored as the answer, once."""
        with self._database.read() as session:
            question = open_question(session, conversation_id)
        if question is None:
            return False
        answer = answer_in_words(controls_of(question.meta), event.text)
        if answer is None:
            return False
        # Closed or answered meanwhile: the reply is an ordinary message.
        return self._answer(channel, event, conversation_id, question.id, answer)

    def _answer(
        self,
        channel: ChannelInfo,
        event: Inbound,
        conversation_id: str,
        question_id: str,
        answer: dict[str, Any],
    ) -> bool:
        """Store the owner's answer through the router, once per channel event; False when
        the question was closed or answered meanwhile."""
        try:
            self._router.answer(
                conversation_id,
                question_id,
                answer,
                None,
                author_id=channel.owner_id,
                server_key=f"{channel.id}:{event.event_id}"[:300],
            )
        except Conflict:
            return False
        return True

    def _answered_by_reaction(self, channel: ChannelInfo, event: Inbound) -> str | None:
        """The owner's reaction to, or button pressed on, the channel's copy of an open
        question answers it (a keycap picks a button; a yes or a no approves, denies, sends or
        discards; a button is its own answer): its conversation, or None when it answered
        nothing (any other reaction, a press on an old or closed question, an answer the
        question does not offer)."""
        found = self.message_known_as(channel, event.reaction_to)
        with self._database.read() as session:
            question = open_question(session, found[1]) if found else None
        if found is None or question is None or question.id != found[0]:
            if event.answer is not None:
                log.info(
                    "a button press answered nothing: the question is no longer open",
                    extra={"channel": channel.name, "on": event.reaction_to[:200]},
                )
            return None
        controls = controls_of(question.meta)
        answer = (
            _pressed(controls, event.answer)
            if event.answer is not None
            else answer_by_reaction(controls, event.text)
        )
        if answer is None or not self._answer(channel, event, found[1], question.id, answer):
            return None
        return found[1]

    def message_known_as(self, channel: ChannelInfo, external_id: str) -> tuple[str, str] | None:
        """(message id, conversation id) of the agent message the channel knows by this id.
        A reaction or a press can arrive before the relay has recorded the id the channel
        gave its send (the owner answered within moments, or the relay's write waits on a
        busy store): while a delivery to this channel is being sent, look again, for up to
        REACTION_SETTLE_S, instead of dropping the owner's answer."""
        deadline = time.monotonic() + REACTION_SETTLE_S
        while True:
            with self._database.read() as session:
                found = delivered_as(session, channel.id, external_id)
                if found is not None or not sending(session, channel.id):
                    return found
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def _mark_wrong(self, channel: ChannelInfo, event: Inbound) -> None:
        """The owner's 👎 on the channel's copy of an agent message marks that message wrong:
        a draft case (the same one however often they react), which they complete in the
        Evals page; a 👎 on anything else is logged and does nothing."""
        note = REACTION_NOTE.format(channel=channel.kind.capitalize())
        where = {"channel": channel.name, "on": event.reaction_to[:200]}
        try:
            found = self.message_known_as(channel, event.reaction_to)
            with self._database.write() as session:
                if found is None:
                    raise NotFound("the channel sent no agent message with this id")
                case = mark_wrong(
                    session,
                    owner_id=channel.owner_id,
                    conversation_id=found[1],
                    message_id=found[0],
                    expected=note,
                    vault_key=self._vault_key,
                )
        except (NotFound, Invalid) as error:
            log.info("a thumbs-down marked nothing wrong: %s", error, extra=where)
            return
        log.info(
            "the owner's thumbs-down marked a reply wrong",
            extra={**where, "conversation_id": case.conversation_id, "case_id": case.id},
        )


def _pressed(controls: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any] | None:
    """A pressed button's answer if the question offers it: a button picks a value or sends
    the draft as it is, never with other text (a forged value answers nothing)."""
    pressed: dict[str, Any] = {k: answer[k] for k in ("value", "action") if k in answer}
    try:
        return validate_answer(controls, pressed)
    except Invalid:
        return None


def _kept_names(channel: ChannelInfo, event: Inbound) -> list[tuple[str, str, bytes]]:
    """Each received file's name in `~/inbox/` (the same for the same event: a repeat finds
    it), its own name and its bytes."""
    prefix = hashlib.sha256(f"{channel.id}:{event.event_id}".encode()).hexdigest()[:8]
    return [
        (f"{prefix}-{n}-{_safe_name(name)}", name, data)
        for n, (name, _, data) in enumerate(event.files)
    ]


def _outside(event: Inbound) -> str:
    """Someone else's words, saying who sent them (the prompt fences them as outside text)."""
    who = f"{event.sender_name} <{event.sender}>" if event.sender_name else event.sender
    subject = f"\nSubject: {event.title}" if event.title else ""
    return f"From: {who}{subject}\n\n{event.text}"
