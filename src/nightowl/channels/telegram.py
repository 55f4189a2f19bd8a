"""Telegram: a bot (made with @BotFather) over the Bot API, through python-telegram-bot.

Effect: the bot posts the agent's messages (MarkdownV2, split at 4096 characters, files as
documents, inline keyboards for questions, approvals and drafts) in the chats bound to
conversations, and, with `alerts`, every important message of the owner's conversations to
the owner's private chat. Trust: Telegram vouches for the sender's user id (the bot token
authenticates long polling; a webhook request is authentic only with the secret token set at
`setWebhook`), so only the configured `owner` id counts as the owner; every other chat is
outside text. A private chat with the owner is a direct conversation; a group is a group
conversation answered only when the bot is mentioned or replied to.

Updates come by long polling (`getUpdates` from the stored offset: a restart neither loses nor
repeats one; the offset moves only after the updates are stored) or by webhook (`mode:
webhook`, to `POST /v1/ingress/<channel id>`). The Bot API has no idempotency key and cannot
list a chat's history, so a send cannot be checked before a retry (`check_before_retry`
off): the relay says so on a message it sends again after a crash mid-send.

Reactions: the channel asks for `message_reaction` updates and reads only a 👎 added to a
message; the inbox makes the owner's on an agent message a case marked wrong (or, on an open
question, its answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from datetime import timedelta
from typing import Any, ClassVar

from telegram import (
    Bot,
    CallbackQuery,
    Chat,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageReactionUpdated,
    ReactionTypeEmoji,
    Update,
)
from telegram.constants import ParseMode
from telegram.error import (
    BadRequest,
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.request import HTTPXRequest

from nightowl.channels.base import (
    Accept,
    Capabilities,
    ChannelConfig,
    ChannelError,
    Delivered,
    HttpReply,
    HttpRequest,
    Inbound,
    Outbound,
)
from nightowl.channels.telegram_markdown import messages
from nightowl.store.questions import KEYCAPS

# Telegram sends a reaction only to a bot that asks for it (in a group, only to an admin bot).
UPDATES = ["message", "callback_query", "message_reaction"]
THUMBS_DOWN = "\U0001f44e"
MAX_FILE_BYTES = 20 * 1024 * 1024  # the Bot API's download limit
MAX_CALLBACK_BYTES = 64  # a button's callback_data
SECRET_HEADER = "x-telegram-bot-api-secret-token"


class TelegramChannel:
    """A Telegram bot the owner talks to in a private chat (and others in groups)."""

    kind: ClassVar[str] = "telegram"
    # The inline keyboard is built here from the question's controls; the relay's text also
    # says which words answer (a reply works too). No reactions answer: the text names none
    # (a 👎 is read, to mark a reply wrong).
    capabilities: ClassVar[Capabilities] = Capabilities(
        buttons=True, files=True, check_before_retry=False
    )

    def __init__(self, config: ChannelConfig) -> None:
        s = config.settings
        self.api_url = str(s.get("api_url") or "https://api.telegram.org").rstrip("/")
        if not self.api_url.startswith(("http://", "https://")):
            raise ChannelError("set api_url to the Bot API's URL", permanent=True)
        owner = str(s.get("owner") or "").strip()
        if not owner.isdigit():
            raise ChannelError(
                "set owner to your numeric Telegram user id (@userinfobot tells it)",
                permanent=True,
            )
        self.owner = owner
        if not isinstance(s.get("alerts", False), bool):
            raise ChannelError("set alerts to true or false", permanent=True)
        self.mode = str(s.get("mode") or "polling")
        if self.mode not in ("polling", "webhook"):
            raise ChannelError("set mode to polling or webhook", permanent=True)
        self.webhook_url = str(s.get("webhook_url") or "")
        self._webhook_secret = ""
        if self.mode == "webhook":
            self._webhook_secret = config.secret("webhook_secret_secret")
            if self.webhook_url and not self.webhook_url.startswith(("http://", "https://")):
                raise ChannelError(
                    "set webhook_url to the ingress URL `GET /v1/channels` shows (Telegram "
                    "takes only https)",
                    permanent=True,
                )
        timeout = s.get("poll_timeout_s") or 25
        if not isinstance(timeout, int) or not 1 <= timeout <= 50:
            raise ChannelError("set poll_timeout_s to whole seconds, 1-50", permanent=True)
        self.poll_timeout_s = timeout
        token = config.secret("bot_token_secret")
        self._bot = Bot(
            token,
            base_url=f"{self.api_url}/bot",
            base_file_url=f"{self.api_url}/file/bot",
            request=HTTPXRequest(connection_pool_size=8, read_timeout=30, media_write_timeout=60),
            get_updates_request=HTTPXRequest(
                connection_pool_size=1, read_timeout=self.poll_timeout_s + 15
            ),
        )
        self._me: Any = None
        self._parts: dict[str, dict[str, str]] = {}  # message id -> its parts sent so far

    async def _call(self, call: Any) -> Any:
        """One Bot API call; its failure as a ChannelError (permanent where a retry cannot
        help, with the wait a rate limit asks for)."""
        try:
            return await call
        except RetryAfter as error:
            wait = error.retry_after
            seconds = wait.total_seconds() if isinstance(wait, timedelta) else float(wait)
            raise ChannelError("Telegram rate limit", retry_after=seconds) from None
        except (BadRequest, Forbidden, InvalidToken) as error:
            raise ChannelError(f"Telegram: {error.message}", permanent=True) from None
        except TelegramError as error:
            raise ChannelError(f"Telegram: {type(error).__name__}: {error.message}") from None

    async def _ready(self) -> Any:
        if self._me is None:
            await self._call(self._bot.initialize())
            self._me = self._bot.bot
        return self._me

    # -- inbound ---------------------------------------------------------------------------

    async def listen(self, position: dict[str, Any], accept: Accept) -> None:
        await self._ready()
        if self.mode == "webhook":
            # Updates arrive at the ingress route; Telegram pushes them once the hook is set.
            if self.webhook_url:
                await self._call(
                    self._bot.set_webhook(
                        self.webhook_url,
                        secret_token=self._webhook_secret,
                        allowed_updates=UPDATES,
                    )
                )
            await accept([], dict(position))  # reached: the channel shows ok
            await asyncio.Event().wait()
        # getUpdates answers 409 while a webhook is set: polling mode takes the bot back.
        await self._call(self._bot.delete_webhook())
        offset = position.get("offset")
        await accept([], dict(position))
        while True:
            updates = await self._call(
                self._bot.get_updates(
                    offset=offset,
                    timeout=self.poll_timeout_s,
                    allowed_updates=UPDATES,
                    read_timeout=self.poll_timeout_s + 15,
                )
            )
            if not updates:
                continue
            events = [e for u in updates for e in await self._events(u)]
            offset = updates[-1].update_id + 1
            await accept(events, {"offset": offset})
            for update in updates:  # the owner's client stops spinning
                if update.callback_query is not None:
                    with contextlib.suppress(ChannelError):
                        await self._call(update.callback_query.answer())

    async def _events(self, update: Update) -> list[Inbound]:
        if update.callback_query is not None:
            press = self._press(update.callback_query)
            return [press] if press is not None else []
        if update.message_reaction is not None:
            reaction = _thumbs_down(update.update_id, update.message_reaction)
            return [reaction] if reaction is not None else []
        message = update.message
        if message is None or message.from_user is None:
            return []
        return [await self._inbound(message)]

    def _press(self, query: CallbackQuery) -> Inbound | None:
        """A press on an inline keyboard: the answer it stands for, to the question of the
        message it is on (the inbox checks the presser and that the question is open)."""
        data = str(query.data or "")
        message = query.message
        if message is None:
            return None
        answer: dict[str, Any] | None = None
        key = ""
        if data.startswith("v:"):
            answer = {"value": data[2:]}
        elif data in ("send", "discard"):
            answer = {"action": data}
        elif data.startswith("k") and data[1:].isdigit() and int(data[1:]) < len(KEYCAPS):
            key = KEYCAPS[int(data[1:])]  # a value too long for callback_data: its keycap
        else:
            return None
        chat, pressed_on, by = message.chat, message.message_id, query.from_user.id
        return _reaction(f"cb{query.id}", chat, pressed_on, by, key, answer)

    async def _inbound(self, message: Message) -> Inbound:
        assert message.from_user is not None
        sender = str(message.from_user.id)
        private = message.chat.type == "private"
        direct = private and sender == self.owner
        addressed = private or self._addressed(message)
        files = await self._download(message) if addressed else []
        text = message.text or message.caption or ""
        if not text and files:
            text = f"(sent a file: {files[0][0]})"
        elif not files and (message.document or message.photo):
            text = (text + "\n\n" if text else "") + "(sent a file that could not be fetched)"
        user = message.from_user
        return Inbound(
            event_id=f"m{message.chat.id}:{message.message_id}",
            thread_key=str(message.chat.id),
            sender=sender,
            text=text,
            direct=direct,
            title=message.chat.title or "",
            address={"chat_id": message.chat.id},
            addressed=addressed,
            sender_name=" ".join(p for p in (user.first_name, user.last_name) if p)
            + (f" (@{user.username})" if user.username else ""),
            files=files,
        )

    def _addressed(self, message: Message) -> bool:
        """In a group: the bot was mentioned (@name) or its message was replied to."""
        replied = message.reply_to_message
        if (
            replied is not None
            and replied.from_user is not None
            and replied.from_user.id == self._me.id
        ):
            return True
        mentions = message.parse_entities(["mention"]) | message.parse_caption_entities(["mention"])
        return f"@{self._me.username}".lower() in {m.lower() for m in mentions.values()}

    async def _download(self, message: Message) -> list[tuple[str, str, bytes]]:
        """The file a message carries (a document or the largest photo), through getFile."""
        if message.document is not None:
            item: Any = message.document
            name, kind = item.file_name or "file", item.mime_type or ""
        elif message.photo:
            item = message.photo[-1]
            name, kind = "photo.jpg", "image/jpeg"
        else:
            return []
        if (item.file_size or 0) > MAX_FILE_BYTES:
            return []
        try:
            found = await self._call(self._bot.get_file(item.file_id))
            data = await self._call(found.download_as_bytearray())
        except ChannelError as error:
            if error.permanent:  # a file Telegram will not give: the message still counts
                return []
            raise
        return [(name, kind, bytes(data))]

    # -- webhook ---------------------------------------------------------------------------

    async def receive_http(self, request: HttpRequest) -> tuple[list[Inbound], HttpReply]:
        """A webhook update: authentic only with the secret token given at setWebhook
        (compared in constant time); a button press is answered in the reply
        (answerCallbackQuery as the webhook's answer), so the owner's client stops spinning."""
        if not self._webhook_secret:
            raise ChannelError(
                "this channel takes no webhook (its mode is polling)", permanent=True
            )
        token = request.headers.get(SECRET_HEADER, "")
        if not token or not hmac.compare_digest(token.encode(), self._webhook_secret.encode()):
            raise ChannelError("wrong or missing X-Telegram-Bot-Api-Secret-Token", permanent=True)
        await self._ready()
        try:
            data = json.loads(request.body)
        except ValueError:
            raise ChannelError("the body is not JSON", permanent=True) from None
        try:
            update = Update.de_json(data, self._bot) if isinstance(data, dict) else None
        except (TypeError, KeyError, ValueError):
            raise ChannelError("the body is not a Telegram update", permanent=True) from None
        if update is None:
            return [], HttpReply(body=b"{}")
        reply = b"{}"
        if update.callback_query is not None:
            reply = json.dumps(
                {"method": "answerCallbackQuery", "callback_query_id": update.callback_query.id}
            ).encode()
        return await self._events(update), HttpReply(body=reply)

    # -- outbound --------------------------------------------------------------------------

    async def deliver(self, outbound: Outbound) -> Delivered:
        # An alerts-only binding has no chat of its own: the owner's private chat.
        chat_id = outbound.address.get("chat_id") or int(self.owner)
        # A message goes out in parts (files, then text pieces of 4096 characters). The parts
        # that went out are remembered, so a retry after a rate limit or a failure half-way
        # sends only the rest (only a crash of the process forgets them).
        done = self._parts.setdefault(outbound.message_id, {})
        try:
            last = await self._send_parts(chat_id, outbound, done)
        except ChannelError as error:
            if error.permanent:  # no retry comes: forget the parts
                del self._parts[outbound.message_id]
            raise
        del self._parts[outbound.message_id]
        return Delivered(last, {"chat_id": chat_id})

    async def _send_parts(self, chat_id: int, outbound: Outbound, done: dict[str, str]) -> str:
        """The files, then the text in pieces, each not sent yet; the last piece's id (it
        carries the keyboard: a press names it)."""
        for n, (name, _, data) in enumerate(outbound.files):
            if f"f{n}" not in done:
                sent = await self._call(
                    self._bot.send_document(chat_id, document=data, filename=name)
                )
                done[f"f{n}"] = f"{sent.chat.id}:{sent.message_id}"
        parts = messages(outbound.text)
        keyboard = _keyboard(outbound.meta)
        for n, part in enumerate(parts):
            if f"t{n}" in done:
                continue
            sent = await self._call(
                self._bot.send_message(
                    chat_id,
                    part,
                    parse_mode=ParseMode.MARKDOWN_V2,
                    reply_markup=keyboard if n == len(parts) - 1 else None,
                )
            )
            done[f"t{n}"] = f"{sent.chat.id}:{sent.message_id}"
        return done[f"t{len(parts) - 1}"]

    async def find_delivered(self, outbound: Outbound) -> Delivered | None:
        return None  # the Bot API cannot list a chat's messages

    async def test(self) -> str:
        me = await self._ready()
        hook = await self._call(self._bot.get_webhook_info())
        if self.mode == "polling":
            webhook = (
                f"a webhook is set to {hook.url}: long polling deletes it when the channel starts"
                if hook.url
                else "no webhook: updates come by long polling"
            )
        elif not hook.url:
            webhook = (
                "no webhook is set yet: set webhook_url to the ingress URL `nightowl channels "
                "list` shows (the channel sets it at start)"
            )
        else:
            pending = f", {hook.pending_update_count} updates waiting"
            error = f", last error: {hook.last_error_message}" if hook.last_error_message else ""
            webhook = f"webhook set to {hook.url}{pending}{error}"
        return f"Telegram bot @{me.username} (id {me.id}) at {self.api_url} ok; {webhook}"

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._bot.shutdown()


def _thumbs_down(update_id: int, changed: MessageReactionUpdated) -> Inbound | None:
    """A 👎 someone added to a message, as a reaction to its `chat:message` id (the id its
    delivery was recorded under); None for any other change (another emoji, a 👎 taken
    back or kept, an anonymous admin's). Other reactions are not read: questions have
    buttons here."""

    def emojis(reactions: Any) -> set[str]:
        return {r.emoji for r in reactions if isinstance(r, ReactionTypeEmoji)}

    added = emojis(changed.new_reaction) - emojis(changed.old_reaction)
    if THUMBS_DOWN not in added or changed.user is None:
        return None
    chat, by = changed.chat, changed.user.id
    return _reaction(f"r{update_id}", chat, changed.message_id, by, THUMBS_DOWN)


def _reaction(
    event_id: str,
    chat: Chat,
    message_id: int,
    sender: int,
    text: str,
    answer: dict[str, Any] | None = None,
) -> Inbound:
    """A press or a reaction by `sender` on a message of `chat`, as a reaction to its
    `chat:message` id (the id its delivery was recorded under)."""
    return Inbound(
        event_id=event_id,
        thread_key=str(chat.id),
        sender=str(sender),
        text=text,
        direct=chat.type == "private",
        address={"chat_id": chat.id},
        reaction_to=f"{chat.id}:{message_id}",
        answer=answer,
    )


def _keyboard(meta: dict[str, Any]) -> InlineKeyboardMarkup | None:
    """Inline buttons for a question, an approval or a draft (a press answers it)."""
    controls = meta.get("controls") or {}
    buttons = controls.get("buttons") or []
    if buttons:
        rows = [
            [InlineKeyboardButton(str(b["label"])[:64], callback_data=_callback(n, b))]
            for n, b in enumerate(buttons[: len(KEYCAPS)])
        ]
        return InlineKeyboardMarkup(rows)
    if "draft" in controls:
        return InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton("Send", callback_data="send"),
                    InlineKeyboardButton("Discard", callback_data="discard"),
                ]
            ]
        )
    return None


def _callback(n: int, button: dict[str, Any]) -> str:
    """A button's callback_data: its value, or its keycap when the value is too long."""
    data = f"v:{button['value']}"
    return data if len(data.encode()) <= MAX_CALLBACK_BYTES else f"k{n}"
