"""Starts the Telegram Bot API stand-in (telegram_api.py) as a process on 127.0.0.1 and plays
its users: the owner and others sending messages, files and button presses."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.server import free_port

OWNER_ID = 424242
STRANGER_ID = 555001


class TelegramStandIn:
    """The stand-in process and what its users do."""

    def __init__(self, folder: Path, token: str) -> None:
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "telegram-api.log"
        folder.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> TelegramStandIn:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("telegram_api.py")),
                    str(self.port),
                    self.token,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"stand-in exited: {self.log.read_text()[-3000:]}")
            try:
                httpx.get(f"{self.url}/_test/state", timeout=1)
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError(f"stand-in did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # uvicorn waits for a long poll in progress: not for long
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def state(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/_test/state", timeout=10).json())

    def sent(self, chat_id: int) -> list[dict[str, Any]]:
        """What the bot put in this chat, oldest first."""
        return [m for m in self.state()["sent"] if m["chat"]["id"] == chat_id]

    def _update(self, update: dict[str, Any]) -> dict[str, Any]:
        answer = httpx.post(f"{self.url}/_test/updates", json=update, timeout=60)
        answer.raise_for_status()
        return dict(answer.json())

    def say(
        self,
        text: str,
        user_id: int = OWNER_ID,
        chat: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """A user's message (in their private chat with the bot unless `chat` says)."""
        user = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        message = {
            "from": user,
            "chat": chat or {"id": user_id, "type": "private", "first_name": user["first_name"]},
            **({"text": text} if text else {}),
            **fields,
        }
        return self._update({"message": message})

    def press(self, message: dict[str, Any], data: str, user_id: int = OWNER_ID) -> dict[str, Any]:
        """A user presses an inline button of a bot message."""
        user = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        query = {
            "id": f"q{time.time_ns()}",
            "from": user,
            "chat_instance": "ci1",
            "data": data,
            "message": {k: message[k] for k in ("message_id", "date", "chat", "from", "text")},
        }
        return self._update({"callback_query": query})

    def react(
        self, message: dict[str, Any], emoji: str, user_id: int = OWNER_ID, old: str = ""
    ) -> dict[str, Any]:
        """A user sets their reaction on a message to `emoji` (it was `old`)."""
        user = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        changed = {
            "chat": message["chat"],
            "message_id": message["message_id"],
            "user": user,
            "date": int(time.time()),
            "old_reaction": [{"type": "emoji", "emoji": old}] if old else [],
            "new_reaction": [{"type": "emoji", "emoji": emoji}] if emoji else [],
        }
        return self._update({"message_reaction": changed})

    def upload(self, name: str, kind: str, data: bytes) -> str:
        """A file a user sends: its file_id."""
        answer = httpx.post(
            f"{self.url}/_test/upload", params={"name": name, "type": kind}, content=data
        )
        return str(answer.json()["file_id"])

    def rate_limit(self, method: str, *retry_after: int) -> None:
        """The next calls of `method` answer 429 with these retry_after seconds."""
        httpx.post(
            f"{self.url}/_test/rate_limit",
            json={"method": method, "retry_after": list(retry_after)},
        )

    def hold(self, held: bool) -> None:
        """Hold back (or release) the answers to sendMessage, after the chat has the message."""
        httpx.post(f"{self.url}/_test/hold", json={"hold": held})
