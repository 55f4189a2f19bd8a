"""A stand-in of the Telegram Bot API (https://core.telegram.org/bots/api) on 127.0.0.1, run
as its own process (`python telegram_api.py PORT TOKEN`) so it outlives a killed nightowl.

It answers the methods the channel uses the way the published API documents them: the
`{"ok": …, "result": …}` / `{"ok": false, "error_code": …, "description": …}` envelope, the
token in the path (`/bot<token>/<method>`, files at `/file/bot<token>/<path>`), parameters as
a query string, form, multipart or JSON body, `getUpdates` long polling that confirms every
update below `offset`, 409 while a webhook is set, 429 with `parameters.retry_after`, 400
"can't parse entities" for MarkdownV2 that does not parse (the entity rules of
https://core.telegram.org/bots/api#markdownv2-style), and `allowed_updates` (kept from the
last getUpdates or setWebhook that named it; unset or empty, every kind but `chat_member`,
`message_reaction` and `message_reaction_count`: an update of another kind is never made).
Test-only routes under `/_test/` play the users (a message, a button press, a reaction, an
uploaded file) and read back what the bot sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

RESERVED = set("_*[]()~`>#+-=|{}.!")
# The update kinds a bot gets only when it names them in allowed_updates.
ASKED_FOR_ONLY = {"chat_member", "message_reaction", "message_reaction_count"}
MAX_TEXT = 4096


class EntityError(ValueError):
    """MarkdownV2 the real API refuses."""


def parse_markdown_v2(text: str) -> tuple[str, list[dict[str, Any]]]:
    """The plain text and entities of a MarkdownV2 message, or EntityError as the API says."""
    out: list[str] = []
    entities: list[dict[str, Any]] = []
    stack: list[tuple[str, int, int]] = []  # (marker, offset in out, byte offset in text)
    i = 0
    line_start = True

    def reserved(ch: str, at: int) -> EntityError:
        return EntityError(
            f"Bad Request: can't parse entities: Character '{ch}' is reserved and must be "
            f"escaped with the preceding '\\'"
        )

    def close(marker: str, kind: str) -> None:
        _, start, _ = stack.pop()
        entities.append({"type": kind, "offset": start, "length": len("".join(out)) - start})

    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or not (1 <= ord(text[i + 1]) <= 126):
                raise reserved("\\", i)
            out.append(text[i + 1])
            i += 2
            line_start = False
            continue
        if text.startswith("```", i):
            end = text.find("```", i + 3)
            if end < 0:
                raise EntityError(
                    f"Bad Request: can't parse entities: Can't find end of Pre entity at byte "
                    f"offset {len(text[:i].encode())}"
                )
            body = text[i + 3 : end]
            language, newline, rest = body.partition("\n")
            code = rest if newline else body
            start = len("".join(out))
            out.append(_unescape_code(code))
            entities.append({"type": "pre", "offset": start, "length": len("".join(out)) - start})
            if newline and language:
                entities[-1]["language"] = language
            i = end + 3
            line_start = False
            continue
        if ch == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise EntityError(
                    f"Bad Request: can't parse entities: Can't find end of Code entity at byte "
                    f"offset {len(text[:i].encode())}"
                )
            start = len("".join(out))
            out.append(_unescape_code(text[i + 1 : end]))
            entities.append({"type": "code", "offset": start, "length": len("".join(out)) - start})
            i = end + 1
            line_start = False
            continue
        if ch == ">" and line_start:
            i += 1
            line_start = False
            continue  # a quoted line: the quote is an entity of its own
        if ch == "[":
            stack.append(("[", len("".join(out)), i))
            i += 1
            line_start = False
            continue
        if ch == "]" and stack and stack[-1][0] == "[":
            if text[i + 1 : i + 2] != "(":
                raise reserved("]", i)
            end = i + 2
            url: list[str] = []
            while end < len(text) and text[end] != ")":
                if text[end] == "\\":
                    end += 1
                url.append(text[end])
                end += 1
            if end >= len(text):
                raise EntityError(
                    "Bad Request: can't parse entities: Can't find end of a URL at byte offset "
                    f"{len(text[:i].encode())}"
                )
            _, start, _ = stack.pop()
            entities.append(
                {
                    "type": "text_link",
                    "offset": start,
                    "length": len("".join(out)) - start,
                    "url": "".join(url),
                }
            )
            i = end + 1
            continue
        marker = next((m for m in ("__", "||", "*", "_", "~") if text.startswith(m, i)), None)
        if marker is not None:
            kinds = {
                "__": "underline",
                "||": "spoiler",
                "*": "bold",
                "_": "italic",
                "~": "strikethrough",
            }
            if stack and stack[-1][0] == marker:
                close(marker, kinds[marker])
            else:
                stack.append((marker, len("".join(out)), i))
            i += len(marker)
            line_start = False
            continue
        if ch in RESERVED:
            raise reserved(ch, i)
        out.append(ch)
        line_start = ch == "\n"
        i += 1
    if stack:
        marker, _, at = stack[-1]
        raise EntityError(
            f"Bad Request: can't parse entities: Can't find end of the entity starting at byte "
            f"offset {len(text[:at].encode())}"
        )
    return "".join(out), entities


def _utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _mentions(text: str) -> list[dict[str, Any]]:
    """The `mention` entities Telegram marks in a user's text (offsets in UTF-16 units)."""
    return [
        {"type": "mention", "offset": _utf16(text[: m.start()]), "length": _utf16(m[0])}
        for m in re.finditer(r"@[A-Za-z0-9_]{5,32}", text)
    ]


def _unescape_code(code: str) -> str:
    """Inside code only ` and \\ are escaped (and must be)."""
    out = []
    i = 0
    while i < len(code):
        if code[i] == "\\" and i + 1 < len(code) and code[i + 1] in "`\\":
            out.append(code[i + 1])
            i += 2
            continue
        if code[i] == "\\":
            raise EntityError(
                "Bad Request: can't parse entities: Character '\\' is reserved and must be "
                "escaped with the preceding '\\'"
            )
        out.append(code[i])
        i += 1
    return "".join(out)


@dataclass
class State:
    """Everything the stand-in knows: the bot, the chats' messages, updates, files."""

    token: str
    bot: dict[str, Any] = field(
        default_factory=lambda: {
            "id": 7000001,
            "is_bot": True,
            "first_name": "Night Owl",
            "username": "nightowl_test_bot",
        }
    )
    updates: list[dict[str, Any]] = field(default_factory=list)
    next_update: itertools.count[int] = field(default_factory=lambda: itertools.count(100))
    next_message: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    sent: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    callback_answers: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)  # id -> name,type,data
    webhook: dict[str, Any] = field(default_factory=dict)
    rate_limits: dict[str, list[int]] = field(default_factory=dict)  # method -> retry_afters
    get_updates_calls: int = 0
    allowed_updates: list[str] = field(default_factory=list)  # empty: the default kinds
    dropped: int = 0  # updates not made: a kind the bot did not ask for
    hold: bool = False  # sendMessage records the message, then holds its answer back
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


def ok(result: Any) -> JSONResponse:
    return JSONResponse({"ok": True, "result": result})


def error(code: int, description: str, **parameters: Any) -> JSONResponse:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return JSONResponse(body, status_code=code)


async def _params(request: Request) -> tuple[dict[str, Any], dict[str, tuple[str, str, bytes]]]:
    """The method's parameters (query, form, multipart or JSON) and its uploaded files."""
    params: dict[str, Any] = dict(request.query_params)
    files: dict[str, tuple[str, str, bytes]] = {}
    kind = request.headers.get("content-type", "")
    if kind.startswith("application/json"):
        params.update(json.loads(await request.body() or b"{}"))
    elif kind.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        form = await request.form()
        for key, value in form.multi_items():
            if isinstance(value, str):
                params[key] = value
            else:
                files[key] = (
                    value.filename or key,
                    value.content_type or "",
                    await value.read(),
                )
    for key in ("reply_markup", "allowed_updates", "reply_parameters"):
        if isinstance(params.get(key), str):
            params[key] = json.loads(params[key])
    return params, files


def build(state: State) -> Starlette:
    """The stand-in's routes."""

    async def method(request: Request) -> Response:
        if request.path_params["token"] != state.token:
            return error(401, "Unauthorized")
        name = request.path_params["method"]
        handler = METHODS.get(name.lower())
        if handler is None:
            return error(404, "Not Found")
        params, files = await _params(request)
        waits = state.rate_limits.get(name, [])
        if waits:
            return error(
                429, f"Too Many Requests: retry after {waits[0]}", retry_after=waits.pop(0)
            )
        return await handler(params, files)

    async def get_me(params: dict[str, Any], files: Any) -> Response:
        return ok(state.bot)

    async def get_updates(params: dict[str, Any], files: Any) -> Response:
        state.get_updates_calls += 1
        if params.get("allowed_updates") is not None:
            state.allowed_updates = list(params["allowed_updates"])
        if state.webhook.get("url"):
            return error(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use "
                "deleteWebhook to delete the webhook first",
            )
        offset = int(params.get("offset") or 0)
        if offset:  # every update below the offset is confirmed: gone for good
            state.updates = [u for u in state.updates if u["update_id"] >= offset]
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while True:
            found = [u for u in state.updates if u["update_id"] >= offset]
            if found or time.monotonic() >= deadline:
                limit = int(params.get("limit") or 100)
                return ok(found[:limit])
            state.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.arrived.wait(), deadline - time.monotonic())

    def _message(chat_id: Any, **content: Any) -> dict[str, Any]:
        chat = int(chat_id)
        message = {
            "message_id": next(state.next_message),
            "date": int(time.time()),
            "chat": {"id": chat, "type": "private" if chat > 0 else "group"},
            "from": state.bot,
            **content,
        }
        state.sent.append({**message, "_at": time.time()})  # when it arrived (read back only)
        return message

    async def send_message(params: dict[str, Any], files: Any) -> Response:
        text = str(params.get("text") or "")
        if not text.strip():
            return error(400, "Bad Request: message text is empty")
        entities: list[dict[str, Any]] = []
        plain = text
        if params.get("parse_mode") == "MarkdownV2":
            try:
                plain, entities = parse_markdown_v2(text)
            except EntityError as refused:
                state.refused.append({"text": text, "error": str(refused)})
                return error(400, str(refused))
        if len(plain) > MAX_TEXT:
            return error(400, "Bad Request: message is too long")
        content: dict[str, Any] = {"text": plain, "source": text}
        if entities:
            content["entities"] = entities
        if params.get("reply_markup"):
            content["reply_markup"] = params["reply_markup"]
        message = _message(params["chat_id"], **content)
        while state.hold:  # the chat has it; the bot does not know yet
            await asyncio.sleep(0.05)
        return ok(message)

    async def send_document(params: dict[str, Any], files: dict[str, Any]) -> Response:
        if "document" not in files:
            return error(400, "Bad Request: there is no document in the request")
        name, kind, data = files["document"]
        file_id = f"doc{len(state.files) + 1}"
        state.files[file_id] = (name, kind, data)
        document = {
            "file_id": file_id,
            "file_unique_id": f"u{file_id}",
            "file_name": name,
            "mime_type": kind,
            "file_size": len(data),
        }
        return ok(_message(params["chat_id"], document=document, caption=params.get("caption")))

    async def answer_callback_query(params: dict[str, Any], files: Any) -> Response:
        state.callback_answers.append(params)
        return ok(True)

    async def get_file(params: dict[str, Any], files: Any) -> Response:
        file_id = str(params.get("file_id") or "")
        if file_id not in state.files:
            return error(400, "Bad Request: invalid file_id")
        name, _, data = state.files[file_id]
        return ok(
            {
                "file_id": file_id,
                "file_unique_id": f"u{file_id}",
                "file_size": len(data),
                "file_path": f"documents/{file_id}_{name}",
            }
        )

    async def set_webhook(params: dict[str, Any], files: Any) -> Response:
        state.webhook = {"url": params.get("url", ""), "secret": params.get("secret_token", "")}
        if params.get("allowed_updates") is not None:
            state.allowed_updates = list(params["allowed_updates"])
        return ok(True)

    async def delete_webhook(params: dict[str, Any], files: Any) -> Response:
        state.webhook = {}
        return ok(True)

    async def get_webhook_info(params: dict[str, Any], files: Any) -> Response:
        return ok(
            {
                "url": state.webhook.get("url", ""),
                "has_custom_certificate": False,
                "pending_update_count": len(state.updates),
            }
        )

    METHODS = {
        "getme": get_me,
        "getupdates": get_updates,
        "sendmessage": send_message,
        "senddocument": send_document,
        "answercallbackquery": answer_callback_query,
        "getfile": get_file,
        "setwebhook": set_webhook,
        "deletewebhook": delete_webhook,
        "getwebhookinfo": get_webhook_info,
    }

    async def download(request: Request) -> Response:
        if request.path_params["token"] != state.token:
            return error(401, "Unauthorized")
        file_id = request.path_params["path"].removeprefix("documents/").split("_", 1)[0]
        if file_id not in state.files:
            return error(404, "Not Found")
        return Response(state.files[file_id][2], media_type="application/octet-stream")

    # -- the users' side (test only) -----------------------------------------------------

    async def add_update(request: Request) -> Response:
        """An update as Telegram makes it (update_id, message_id and date filled in); pushed
        to the webhook when one is set (with its secret token), queued for getUpdates too."""
        update = await request.json()
        kinds = set(update) & (ASKED_FOR_ONLY | {"message", "callback_query", "edited_message"})
        allowed = state.allowed_updates
        if any(k not in allowed if allowed else k in ASKED_FOR_ONLY for k in kinds):
            state.dropped += 1  # Telegram makes no update the bot did not ask for
            return JSONResponse({"update": None, "dropped": True})
        update["update_id"] = next(state.next_update)
        at = time.time()
        message = update.get("message")
        if message is not None:
            message.setdefault("message_id", next(state.next_message))
            message.setdefault("date", int(time.time()))
            if "text" in message and "entities" not in message:
                message["entities"] = _mentions(message["text"])
        state.updates.append(update)
        state.arrived.set()
        hook = state.webhook.get("url")
        if hook:
            headers = {"X-Telegram-Bot-Api-Secret-Token": state.webhook.get("secret", "")}
            async with httpx.AsyncClient() as client:
                pushed = await client.post(hook, json=update, headers=headers, timeout=30)
            if pushed.status_code == 200:  # Telegram keeps an update until its hook took it
                state.updates.remove(update)
            return JSONResponse({"update": update, "webhook_status": pushed.status_code, "at": at})
        return JSONResponse({"update": update, "at": at})

    async def upload(request: Request) -> Response:
        """A file a user sent: its file_id."""
        name = request.query_params.get("name", "file")
        file_id = f"up{len(state.files) + 1}"
        state.files[file_id] = (name, request.query_params.get("type", ""), await request.body())
        return JSONResponse({"file_id": file_id})

    async def rate_limit(request: Request) -> Response:
        body = await request.json()
        state.rate_limits.setdefault(body["method"], []).extend(body["retry_after"])
        return JSONResponse({})

    async def hold(request: Request) -> Response:
        state.hold = bool((await request.json())["hold"])
        return JSONResponse({})

    async def read_back(request: Request) -> Response:
        return JSONResponse(
            {
                "sent": state.sent,
                "refused": state.refused,
                "callback_answers": state.callback_answers,
                "pending_updates": len(state.updates),
                "get_updates_calls": state.get_updates_calls,
                "allowed_updates": state.allowed_updates,
                "dropped": state.dropped,
                "webhook": state.webhook,
                "files": {
                    k: [n, t, d.decode(errors="replace")] for k, (n, t, d) in state.files.items()
                },
            }
        )

    return Starlette(
        routes=[
            Route("/bot{token}/{method}", method, methods=["GET", "POST"]),
            Route("/file/bot{token}/{path:path}", download, methods=["GET"]),
            Route("/_test/updates", add_update, methods=["POST"]),
            Route("/_test/upload", upload, methods=["POST"]),
            Route("/_test/rate_limit", rate_limit, methods=["POST"]),
            Route("/_test/state", read_back, methods=["GET"]),
            Route("/_test/hold", hold, methods=["POST"]),
        ]
    )


if __name__ == "__main__":
    port, token = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(build(State(token)), host="127.0.0.1", port=port, log_level="warning")
